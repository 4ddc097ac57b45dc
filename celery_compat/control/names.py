"""Celery's names on the engine's remote control: the command set ``celery``, ``celery@<host>``.

Why it exists: the engine's workers answer the engine's own commands (``ping``, ``stats``,
``attempts``...) in the engine's words; a Celery app's worker adds Celery's commands as the
engine's command set ``celery`` (``worker_commands.py``), reached as ``celery.<command>``. The
caller (``app_control.py``) and the broker's pidbox (``broker.py``) name Celery's commands so,
and pick out the live nodes that answer them, from here. A Celery app's worker is named as
Celery names it, ``celery@<host>``, when ``-n`` gives no name (the engine's own is ``ujobs@``).

What it is not: the commands themselves (``worker_commands.py``).
"""

from __future__ import annotations

from typing import Any

COMMAND_SET = "celery"
NODE_PREFIX = "celery"  # Celery's default node name: celery@<host>


def command(name: str) -> str:
    """Celery's command ``name`` as the engine's panel knows it (``celery.<name>``)."""
    return f"{COMMAND_SET}.{name}"


def celery_node(info: Any) -> bool:
    """Does a live node's row (its ``info``) say it answers Celery's commands?"""
    sets = info.get("command_sets") if isinstance(info, dict) else None
    return isinstance(sets, list) and COMMAND_SET in sets
