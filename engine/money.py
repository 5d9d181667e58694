"""Dollar amounts as every view shows them: `resenv show`, `resenv report`, the dashboard.

One formatter, so that one cost reads the same everywhere. Before it, each view had its own
(`$%.2f` here, `$%.4f` there), so an agent run that cost $0.003 read "$0.00" (as if free) in one
place and "$0.0030" in another, and a cost nobody knew (a model without a price, an agent that
reports none) read "$0.00" in one place and "—" in another. The rules:

* unknown (None) is always ``—``, never ``$0.00``: no price is not zero dollars;
* a known zero is ``$0.00``;
* from one dollar up: cents, rounded half up, with thousands separators (``$12.35``, ``$1,234.50``);
* below one dollar: two significant digits and at least cents, so a small cost never reads as zero
  and a typical agent run's cost is not rounded by a fifth (``$0.026``, ``$0.50``, ``$0.0030``,
  ``$0.00012``); below a millionth of a dollar, ``<$0.000001`` (``≥$0`` as a lower bound);
* ``partial`` (some of the tokens had no price, so the sum is a lower bound) prefixes ``≥``.

Machine-readable outputs (``--json``) keep the raw number, or null when unknown, never this text.
The module is standard library only: the dashboard imports it without the engine.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

UNKNOWN = "—"
SMALLEST = Decimal("0.000001")
CENT = Decimal("0.01")
HUGE = Decimal(10) ** 15


def usd(amount: float | int | None, partial: bool = False) -> str:
    """`amount` dollars as text (see the module's rules); None is unknown."""
    if amount is None:
        return UNKNOWN
    value = Decimal(repr(float(amount)))  # the shortest decimal of the float: 12.345 rounds to 12.35
    if not value.is_finite():
        return UNKNOWN
    sign = "-" if value < 0 else ""
    value = abs(value)
    prefix = "≥" if partial else ""
    if value == 0:
        return f"{prefix}$0.00"
    if value >= HUGE:  # beyond any real spend (a hostile figure): never a crash of the view
        return f"{prefix}{sign}${float(value):.2e}"
    if value < SMALLEST:  # a lower bound this small bounds nothing worth a digit
        return "≥$0" if partial else f"{sign}<${SMALLEST}"
    if value < 1:
        exponent = min(value.adjusted(), -1)  # 0.003 -> -3; 0.5 -> -1 (at least cents)
        small = value.quantize(Decimal(1).scaleb(exponent - 1), rounding=ROUND_HALF_UP)
        if small.adjusted() > exponent:  # rounding carried a digit (0.0099999 -> 0.010, not 0.0100)
            small = small.quantize(Decimal(1).scaleb(min(small.adjusted(), -1) - 1), rounding=ROUND_HALF_UP)
        if small < 1:
            return f"{prefix}{sign}${small:f}"
    return f"{prefix}{sign}${value.quantize(CENT, rounding=ROUND_HALF_UP):,.2f}"


def spend(total: float | None, priced: int, rows: int) -> tuple[float | None, bool]:
    """A cost summed over usage rows (`SUM(cost_usd)`, `COUNT(cost_usd)`, `COUNT(*)`) as (dollars, or
    None when no row had a price; whether some row had none, so that a known sum is a lower bound).
    No rows at all is (None, False): nothing was spent that anyone recorded."""
    if not rows:
        return None, False
    if not priced or total is None:
        return None, True
    return float(total), priced < rows


def add(a: tuple[float | None, bool], b: tuple[float | None, bool]) -> tuple[float | None, bool]:
    """Two (dollars, partial) costs summed: unknown plus known is known and partial."""
    cost = b[0] if a[0] is None else a[0] if b[0] is None else a[0] + b[0]
    return cost, a[1] or b[1]
