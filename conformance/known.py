"""Why a test that passes on Celery+Redis does not pass on the bridge: one reason per test.

Why it exists: the conformance target is "everything that passes on Celery and uses only the
features celery_compat promises passes on the bridge; every exception explained". The
explanations live here, keyed by test node id (or a ``::``-suffix of it), so the report prints
them next to the failure and a new, unexplained difference stands out.

What it is not: a skip list. Every test still runs; this only annotates the report.
"""

from __future__ import annotations

STAMP_REVOKE = (
    "revoke_by_stamped_headers is worker memory in Celery (revoked_stamps); celery_compat has "
    "no durable stamped-header revoke (stamping is not in its feature list), so nothing is revoked"
)
REDIS_PUBSUB = (
    "asserts the Redis result backend's pub/sub channel subscriptions (Redis internals); "
    "celery_compat's backend waits on Postgres NOTIFY"
)

REASONS: dict[str, str] = {
    "test_task_sent_event_respects_publish_retry_limit": (
        "sends with an explicit kombu Producer on a broker connection "
        "(app.amqp.Producer(connection)): celery_compat publishes a message handed to a broker "
        "producer to that broker, as asked (tasks go to Postgres when sent without one), and "
        "nothing consumes that broker in this run, so the task never runs"
    ),
    "test_revoked_by_headers_simple_canvas": STAMP_REVOKE,
    "test_revoked_by_headers_complex_canvas": STAMP_REVOKE,
    "test_revoke_by_stamped_headers_no_match": STAMP_REVOKE,
    "test_asyncresult_forget_cancels_subscription": REDIS_PUBSUB,
    "test_asyncresult_get_cancels_subscription": REDIS_PUBSUB,
}


def reason_for(node: str) -> str:
    name = node.rsplit("::", 1)[-1]
    for key, reason in REASONS.items():
        if name == key or (key.endswith("[") and name.startswith(key)):
            return reason
    return ""
