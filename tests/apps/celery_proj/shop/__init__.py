"""An installed Django app of the test project (its ``tasks.py`` is autodiscovered)."""
