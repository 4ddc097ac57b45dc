"""Why a test that passes on Celery+Redis does not pass on the bridge: one reason per test.

Why it exists: the conformance target is "everything that passes on Celery and uses only the
features celery_compat promises passes on the bridge; every exception explained". The
explanations live here, keyed by test node id (or a ``::``-suffix of it), so the report prints
them next to the failure and a new, unexplained difference stands out.

What it is not: a skip list. Every test still runs; this only annotates the report.
"""

from __future__ import annotations

REASONS: dict[str, str] = {}


def reason_for(node: str) -> str:
    for key, reason in REASONS.items():
        if node.endswith(key) or f"::{key}" in node:
            return reason
    return ""
