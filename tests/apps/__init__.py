"""Job modules that worker subprocesses load with ``-A`` in tests."""
