"""A package whose ``__init__`` does not import its app: ``-A apps.guide_bare`` must still find
it in ``apps/guide_bare/celery.py``, as Celery's ``find_app`` does (the ``module.celery``
submodule)."""
