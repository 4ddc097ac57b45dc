"""celery_compat's rows for the engine's retention sweep (entry point ``ujobs_bridge.retention``).

Why it exists: the facade's tables grow per task (results, the message ledger, chord parts,
revokes) and the engine's ``purge`` job must sweep them too, without the engine knowing them.
Results go once past ``result_expires`` (already invisible to ``AsyncResult``); ledger and
revoke rows once older than the cutoff with their jobs finished: the ledger is the dedup window of
Celery task ids, so it lasts as long as the jobs.

What it is not: a schedule or a second sweep; the engine's purge job runs this target as one of
its durable steps.
"""

from __future__ import annotations

from ujobs_bridge.purge import PurgeTarget

from .db.retention import purge_celery


def targets() -> list[PurgeTarget]:
    return [PurgeTarget("x_celery", purge_celery)]
