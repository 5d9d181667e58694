"""The one dollar formatter (engine/money.py) and the one set of infrastructure error categories
(engine/outcomes.py) that every view uses."""

from __future__ import annotations

import pytest

from resenv.engine.money import add, spend, usd
from resenv.engine.outcomes import is_retried, INFRA_CATEGORIES, errors_text, is_infra, state_text


@pytest.mark.parametrize("amount, text", [
    (None, "—"),  # unknown is never $0.00
    (0, "$0.00"), (0.0, "$0.00"),  # a known zero is
    (0.003, "$0.0030"),  # a small cost keeps two significant digits
    (0.00012, "$0.00012"), (0.0049999, "$0.0050"), (0.000001, "$0.0000010"),
    (0.0000004, "<$0.000001"),
    (0.00999, "$0.010"), (0.01, "$0.010"), (0.0099999, "$0.010"),  # rounding carries: still two digits
    (0.026055, "$0.026"), (0.5, "$0.50"), (0.12345, "$0.12"),  # below a dollar: two significant digits
    (0.999, "$1.00"),
    (12.345, "$12.35"), (2.675, "$2.68"),  # half up, on the decimal the float stands for
    (1234.5, "$1,234.50"), (1234567.891, "$1,234,567.89"),
    (float("nan"), "—"),
])
def test_usd(amount, text) -> None:
    assert usd(amount) == text


def test_partial_costs_are_lower_bounds() -> None:
    assert usd(0.003, partial=True) == "≥$0.0030"
    assert usd(12.345, partial=True) == "≥$12.35"
    assert usd(None, partial=True) == "—"
    assert usd(0.0000004, partial=True) == "≥$0"


def test_spend_of_usage_rows() -> None:
    assert spend(None, 0, 0) == (None, False)  # no usage at all: unknown
    assert spend(None, 0, 2) == (None, True)  # tokens spent, none priced: unknown
    assert spend(0.003, 1, 1) == (0.003, False)
    assert spend(0.5, 1, 2) == (0.5, True)  # one model without a price: a lower bound
    assert spend(0.0, 1, 1) == (0.0, False)  # a known zero stays zero
    assert add((None, False), (0.003, False)) == (0.003, False)
    assert add((0.5, False), (None, True)) == (0.5, True)
    assert add((None, False), (None, False)) == (None, False)


def test_infra_categories_and_error_counts() -> None:
    assert INFRA_CATEGORIES == {"infra", "model_api", "host_setup"}
    # a host set up wrong is infrastructure too, but trying again cannot mend it
    assert is_retried("infra") and is_retried("model_api") and not is_retried("host_setup")
    assert is_infra("model_api") and is_infra("infra") and not is_infra("timeout") and not is_infra(None)
    assert errors_text({}) == ""
    out = ", outside every denominator"
    assert errors_text({"infra": 1, "model_api": 1}) == "2 infra errors (1 model_api)" + out
    assert errors_text({"model_api": 1}) == "1 infra error (1 model_api)" + out
    assert errors_text({"infra": 3}) == "3 infra errors" + out
    assert errors_text({"infra": 1, "timeout": 2, "brand_new": 1}) == \
        "1 infra error" + out + "; 3 other errors (2 timeout, 1 brand_new)"  # open-ended: any stored category shows
    assert state_text("error", "model_api") == "error/model_api"
    assert state_text("error", None) == "error" and state_text("done", "infra") == "done"
