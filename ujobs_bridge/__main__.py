"""``python -m ujobs_bridge`` runs the CLI."""

from ujobs_bridge._internal.cli import main

main()
