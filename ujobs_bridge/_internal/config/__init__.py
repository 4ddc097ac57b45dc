"""How a process finds what it runs against: the database (``dsn``, ``embedded``), who may change
its schema (``schema_access``), what packages above contribute (``plugins``) and the app ``-A``
names (``loading``).

What it is not: the settings of a worker (``ujobs_bridge._internal.worker.config``).
"""
