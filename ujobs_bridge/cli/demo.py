"""``ujobs-bridge demo``: placeholder, replaced below."""

from __future__ import annotations

import click


@click.command()
def demo() -> None:
    """Run the demo."""
    click.echo("demo")
