"""Remote control: ``app.control`` over Postgres (``app_control``), the commands a bridge worker
answers with Celery's replies (``worker_commands``, the engine's command set ``celery``: ``names``)
and the pidbox on the cutover broker (``broker``).

What it is not: events (``celery_compat.events``).
"""
