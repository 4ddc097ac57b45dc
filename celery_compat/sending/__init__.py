"""Sending: Celery task messages written as ``x_jobs`` rows instead of broker messages.

``send`` (``app.send_task``/``.delay()``), ``message_row`` (a protocol-v2 message as a row, shared
with ``migrate``), ``send_keys`` (deduplicated sends), ``group_sends`` (a group written together),
``queue_names`` (names no worker could consume, refused) and ``transaction`` (``enqueue_in``).

What it is not: the worker side (``celery_compat.worker``) or results (``celery_compat.backend``).
"""
