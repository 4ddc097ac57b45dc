"""What a contributed command (entry point ``ujobs_bridge.cli``) or a replacement of Celery's
``worker``/``beat`` commands composes: the shared options, output, the demo's tables, the worker's
and scheduler's serve functions, the worker flags' parsers and the one-line failure every command
prints (``one_line_errors``).

What it is not: the engine's own commands.
"""

from __future__ import annotations

from ujobs_bridge._internal.cli.demo_tables import failure as demo_failure
from ujobs_bridge._internal.cli.demo_tables import figures_table as demo_figures_table
from ujobs_bridge._internal.cli.demo_tables import footnote as demo_footnote
from ujobs_bridge._internal.cli.engine_demo import live_in_queue
from ujobs_bridge._internal.cli.failures import one_line_errors
from ujobs_bridge._internal.cli.options import (
    CLI_ROLE,
    app_database,
    app_option,
    checked_filters,
    database,
    dsn_option,
    json_option,
    log_format_option,
    metrics_options,
    pgbouncer_option,
    print_json,
)
from ujobs_bridge._internal.cli.output import cell, console
from ujobs_bridge._internal.cli.scheduler import serve as serve_scheduler
from ujobs_bridge._internal.cli.worker_flags import (
    autoscale,
    autoscale_keepalive,
    log_level,
    node_name,
    pool,
    refusal,
    remove_pidfile,
    setup_logging,
    write_pidfile,
)
from ujobs_bridge._internal.cli.worker_serve import WorkerFlags
from ujobs_bridge._internal.cli.worker_serve import serve as serve_worker
from ujobs_bridge._internal.observe.logs import SaidLines, json_chosen, say

__all__ = [
    "CLI_ROLE",
    "SaidLines",
    "WorkerFlags",
    "app_database",
    "app_option",
    "autoscale",
    "autoscale_keepalive",
    "cell",
    "checked_filters",
    "console",
    "database",
    "demo_failure",
    "demo_figures_table",
    "demo_footnote",
    "dsn_option",
    "json_chosen",
    "json_option",
    "live_in_queue",
    "log_format_option",
    "log_level",
    "metrics_options",
    "node_name",
    "one_line_errors",
    "pgbouncer_option",
    "pool",
    "print_json",
    "refusal",
    "remove_pidfile",
    "say",
    "serve_scheduler",
    "serve_worker",
    "setup_logging",
    "write_pidfile",
]
