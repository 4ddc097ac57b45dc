"""migrate's contributions to the ``ujobs-bridge`` command line.

Why it exists: the engine's CLI knows only engine commands; this package adds ``migrate`` with
its ``quarantine`` subcommands (entry point ``ujobs_bridge.cli``) and the drain part of ``demo``
(``ujobs_bridge.demo``), declared in ``pyproject.toml``.

What it is not: the drainer (``migrate/runner.py`` and the transports).
"""
