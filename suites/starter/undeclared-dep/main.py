"""CPU entrypoint: build a schedule with dateutil, check it against the stdlib, render it."""

from __future__ import annotations

import calendar
import datetime as dt
import sys

from tabulate import tabulate

from schedule import month_ends, payment_days


def expected_month_ends(start: dt.date, count: int) -> list[dt.date]:
    out, year, month = [], start.year, start.month
    for _ in range(count):
        out.append(dt.date(year, month, calendar.monthrange(year, month)[1]))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def main() -> int:
    start = dt.date(2023, 11, 15)
    ends = month_ends(start, 30)
    errors = []
    if ends != expected_month_ends(start, 30):
        errors.append("month ends differ from calendar.monthrange")
    if dt.date(2024, 2, 29) not in ends:
        errors.append("leap day 2024-02-29 missing")
    pays = payment_days(dt.date(2024, 1, 1), 12, 31)
    if [d.day for d in pays] != [calendar.monthrange(2024, m)[1] for m in range(1, 13)]:
        errors.append(f"payment days wrong: {pays}")
    table = tabulate([(e.isoformat(), e.strftime("%a")) for e in ends[:6]], headers=["month end", "weekday"])
    if "2023-11-30" not in table or "month end" not in table:
        errors.append("table rendering lost rows")
    print(table)
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"OK: {len(ends)} month ends and {len(pays)} payment days checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
