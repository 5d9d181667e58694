"""Monthly schedules with dateutil: the month-end arithmetic that datetime alone does not do."""

from __future__ import annotations

import datetime as dt

from dateutil.relativedelta import relativedelta
from dateutil.rrule import MONTHLY, rrule


def month_ends(start: dt.date, count: int) -> list[dt.date]:
    """The last day of `count` consecutive months, starting with the month of `start`."""
    first = start.replace(day=1)
    return [first + relativedelta(months=i + 1, days=-1) for i in range(count)]


def payment_days(start: dt.date, count: int, day: int) -> list[dt.date]:
    """Day `day` of each month (clipped to the month's length), via rrule's bymonthday."""
    rule = rrule(MONTHLY, dtstart=start, count=count, bymonthday=(day, -1), bysetpos=1)
    return [d.date() for d in rule]
