"""The example's one app: the tasks an order shop sends to the background."""
