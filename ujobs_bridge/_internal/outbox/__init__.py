"""The transactional outbox: stage jobs in your own transaction, relay them in commit order.

Why it is a package: staging (``staging.py``, inside the caller's transaction) and relaying
(``relay.py``, a loop that publishes staged rows to ``x_jobs`` of this or another database) are
the two halves of one guarantee: a job exists if and only if the transaction that staged it
committed, and rows are published in commit order.

What it is not: the worker; relayed rows are ordinary jobs.

Imports nothing: the public names (``OutboxRelay``, ``Staged``, ``stage``) are the root's
(``ujobs_bridge``); the engine imports the modules themselves.
"""
