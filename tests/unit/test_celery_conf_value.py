"""``.delay()`` reads celery_compat's own settings (``ujobs_broker_tasks``,
``ujobs_max_deliveries``) through ``conf_value``: it must answer exactly what ``conf.get``
answers, live, under every spelling Celery accepts (set or unset, a namespace prefix, the old
upper-case names), only without Celery's exception per miss."""

from __future__ import annotations

from typing import Any

import pytest

from celery_compat import Celery
from celery_compat.sending.send import conf_value

KEYS = ("ujobs_max_deliveries", "ujobs_broker_tasks", "task_default_queue", "broker_url")


class _Config:
    CELERY_UJOBS_MAX_DELIVERIES = 5
    CELERY_TASK_DEFAULT_QUEUE = "from_namespace"


def _same(app: Any) -> None:
    for key in KEYS:
        assert conf_value(app.conf, key, "default") == app.conf.get(key, "default"), key


def test_unset_and_set_keys_read_as_conf_get_reads_them_and_live() -> None:
    app = Celery("conf_value_plain", set_as_current=False)
    _same(app)  # before the configuration is loaded
    assert conf_value(app.conf, "ujobs_max_deliveries") is None
    app.conf.ujobs_max_deliveries = 7
    app.conf.ujobs_broker_tasks = ["legacy.*"]
    _same(app)
    assert conf_value(app.conf, "ujobs_max_deliveries") == 7
    app.conf.ujobs_max_deliveries = 2  # changed after a read: the next read sees it
    assert conf_value(app.conf, "ujobs_max_deliveries") == 2
    assert app.goes_to_broker("legacy.add") and not app.goes_to_broker("new.add")


def test_a_namespaced_configuration_reads_the_same() -> None:
    app = Celery("conf_value_namespaced", set_as_current=False)
    app.config_from_object(_Config, namespace="CELERY")
    _same(app)
    assert conf_value(app.conf, "ujobs_max_deliveries") == 5
    assert conf_value(app.conf, "task_default_queue") == "from_namespace"


@pytest.mark.parametrize("old_name", ["CELERY_DEFAULT_QUEUE"])
def test_an_old_style_name_reads_the_same(old_name: str) -> None:
    app = Celery("conf_value_old", set_as_current=False)
    app.conf.update(task_default_queue="renamed")
    assert conf_value(app.conf, old_name, "x") == app.conf.get(old_name, "x")
