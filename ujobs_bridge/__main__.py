"""``python -m ujobs_bridge`` runs the CLI."""

from ujobs_bridge.cli import main

main()
