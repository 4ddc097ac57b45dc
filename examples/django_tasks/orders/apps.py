"""The ``orders`` app config."""

from django.apps import AppConfig


class OrdersConfig(AppConfig):
    name = "orders"
