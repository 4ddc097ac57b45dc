"""The worker: claims ready jobs, runs each attempt, writes its outcome, and never loses a job.

Why it is a package: the worker (``loop.py``, class ``Worker``) and what it composes are one
component with one boundary: the claim connection and its statements (``claims.py``), the
in-flight table, the only place an attempt is settled (``inflight.py``), the attempt core every
runtime shares (``attempt.py``: ``run_body``, ``perform``), the runtimes behind one interface
(``runtimes.py``: body threads from ``body_threads.py``, an event loop, a process pool of kept
children, ``children.py``, each running ``child.py``), how attempts are stopped early
(``stopping.py``), the outcome batch (``outcome_batch.py``), the claim loop (``claim_loop.py``),
and the ``Service`` loops at its side, the lease heartbeat (``heartbeat.py``), the wake-up
listener (``listener.py``), the node's presence and mailbox (``presence.py``) and the
autoscaler (``autoscale.py``). Depends only downward: on the engine's ``db``, ``steps``,
``context`` and ``job``; nothing below imports it.

Inside, each layer imports only the ones before it: the pieces (``config``, ``attempt``,
``inflight``, ``claims``, ``outcome_*``, ``listener``, ``heartbeat``); what remote control and
the autoscaler see of a worker (``steering.py``, a protocol); the pool children (``child.py`` <-
``children.py`` <- ``runtimes.py`` <- ``stopping.py``); the command panel and the mailbox
(``control.py`` <- ``presence.py``), the autoscaler and the claim loop, each given what it needs;
and ``loop.py``, which composes them and which none of them imports. This file imports nothing:
the public names (``Worker``, ``WorkerConfig``) are the root's (``ujobs_bridge``) and
``ujobs_bridge.ext.worker``'s.

What it is not: the CLI (``ujobs_bridge._internal.cli``) or the place jobs are declared
(``ujobs_bridge.job``).
"""
