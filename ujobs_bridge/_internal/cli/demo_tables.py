"""How the parts of ``ujobs-bridge demo`` print: one look for the engine, Celery and migrate parts.

Why it exists: each part of the demo ends with a table of what the database (or Celery) showed,
a dim line saying where the figures come from, and, if the part failed, one red line saying
why. Those shapes are defined here once, so the three parts (``engine_demo.py``,
``celery_compat/cli/demo.py``, ``migrate/cli/demo.py``) read alike and cannot drift apart:

- ``figures_table``: a headerless table of figure | value (right-aligned) | what it counts;
- ``footnote``: the dim line under a table (printed without rich's number highlighting);
- ``failure``: the red "<part> part failed: <error>" line, only when there is an error.

What it is not: the figures themselves (each part reads its own from the database) or the JSON
output (``--json`` prints each part's ``as_json``).
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table


def figures_table(title: str) -> Table:
    """Rows of ``add_row(figure, value, note)``: bold figure, right-aligned value, dim note."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    return table


def footnote(console: Console, text: str) -> None:
    """``text`` (rich markup) dimmed, under the table it explains."""
    console.print(f"[dim]{text}[/dim]", highlight=False)


def failure(console: Console, part: str, error: str | None) -> None:
    """``<part> part failed: <error>`` in red, if the part recorded an error."""
    if error is not None:
        console.print(f"[red]{part} part failed: {escape(error)}[/red]")
