"""The dashboard's screens: run overview, job detail, hosts, history, compare, and the modals.

Screens never query the store on a timer themselves: the app's paint timer hands each one the
coalesced `Changes` of its feed (`apply_changes`), and the screen updates only what changed
(DataTable cells in place by stable row keys; rows are rebuilt only when the set of rows changes).
One-shot loads (a job's evidence, history, leases) run in worker threads.

One module per screen (`overview`, `job`, `hosts`, `history`, `compare`, `modals`); `base` holds
what they share, `report` what the job screen shows of the judges. A screen reaches the app only
through `base.Dashboard`.
"""

from __future__ import annotations

from .base import Dashboard, DashScreen
from .compare import CompareScreen
from .history import HistoryScreen
from .hosts import HostsScreen
from .job import JobScreen
from .modals import ConfirmScreen, HelpScreen
from .overview import OverviewScreen
from .report import report_table

__all__ = ["CompareScreen", "ConfirmScreen", "DashScreen", "Dashboard", "HelpScreen", "HistoryScreen", "HostsScreen",
           "JobScreen", "OverviewScreen", "report_table"]
