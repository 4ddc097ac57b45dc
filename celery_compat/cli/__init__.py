"""celery_compat's contributions to the ``ujobs-bridge`` command line.

Why it exists: the engine's CLI knows only engine commands; this package adds ``beat`` (entry
point ``ujobs_bridge.cli``) and the Celery part of ``demo`` (``ujobs_bridge.demo``), declared in
``pyproject.toml``.

What it is not: the engine's CLI (``ujobs_bridge/cli``), whose flags and helpers these reuse.

Imports nothing: a module that needs one command's piece (the app's ``purge`` connection,
``app_for_command``) imports that module, not every command.
"""
