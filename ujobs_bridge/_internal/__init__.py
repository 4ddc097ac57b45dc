"""The engine's machinery: no name under ``ujobs_bridge._internal`` is a contract.

Why it exists: users import from ``ujobs_bridge`` (and ``ujobs_bridge.testing``); the packages built
on the engine (``celery_compat``, ``migrate``) import from ``ujobs_bridge.ext``. Everything here can
be renamed, split or merged without notice, and the layering test refuses an upper package that
reaches in.

What it is not: a second public API. A name an upper package needs is added to ``ujobs_bridge.ext``
first.
"""
