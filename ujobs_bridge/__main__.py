"""``python -m ujobs_bridge`` runs the CLI."""

from .cli import main

main()
