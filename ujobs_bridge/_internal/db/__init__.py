"""The engine's SQL seam: the only package that executes SQL.

Why it exists: every statement the engine runs lives in ``sql/*.sql`` (named blocks, one file per
domain) and is executed by a function in this package that takes the connection to run on (the
caller decides the transaction) and typed parameters. Schema changes are the numbered
``migrations/``. Reviewing the engine's SQL means reading this folder and nothing else.

What it is not: a pool or a lifecycle owner; connections are opened by ``connections.py`` with one
policy, and owned by the loop or client that opened them.
"""
