"""The engine's extension surface: what the packages built on it (``celery_compat``, ``migrate``)
may import, and the only engine names they may import besides the public root.

Why it exists: an upper package that reached into the engine's machinery would make every engine
refactor ripple upward, and nobody could say which engine names are a contract. The names here
are that contract; ``ujobs_bridge._internal`` is not, and the layering test
(``tests/test_project.py``) fails when ``celery_compat`` or ``migrate`` imports from it.

One module per concern an upper package extends:

- ``jobs``: job definitions and what a running body sees (context, outcomes, retry, ids, names);
- ``worker``: the worker loop an upper package configures, its in-flight table, extra wake-up
  channels, the ``Service`` shape every loop has, fault points;
- ``control``: the engine's remote control, the commands a worker answers and the caller's side;
- ``loaders``: how ``-A`` finds an app's jobs (the ``ujobs_bridge.loaders`` entry point);
- ``database``: connections, roles, statements run directly, SQL files, ids, DSNs;
- ``scheduling``: schedules, periodic tasks and the scheduler a beat replacement runs;
- ``retention``: purge targets (the ``ujobs_bridge.retention`` entry point);
- ``observe``: metrics, health, logs, tracing, redaction, introspection;
- ``operator``: an operator's actions on jobs (requeue, cancel, discard), for a package's own
  interface (Django's admin);
- ``dashboard``: panels an upper package adds to the dashboard (needs the ``dashboard`` extra);
- ``cli``: options, output and serve functions a contributed command composes.

What it is not: the user's API (``ujobs_bridge``, ``ujobs_bridge.testing``). Adding a name here is
a promise: add it when an upper package needs it, with the module it belongs to.
"""
