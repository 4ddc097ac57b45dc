"""What the engine shows about itself: health checks, logs, metrics, traces, introspection, and the
redaction applied before any of it is shown.

What it is not: a place that steers jobs by itself; ``introspect`` steers only when an operator asks.
"""
