"""An operator's actions on jobs, for the packages that offer them in their own user interface
(``ujobs_django.jobs``: Django's admin): ``act`` with its ``ACTIONS`` on the rows a
``JobFilter`` matches, the same function the dashboard's buttons call.

What it is not: a permission check; the caller decides who may act.
"""

from __future__ import annotations

from ujobs_bridge._internal.db.bulk import JobFilter
from ujobs_bridge._internal.jobs.operator import ACTIONS, act

__all__ = ["ACTIONS", "JobFilter", "act"]
