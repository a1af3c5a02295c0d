"""Dollar amounts as integer micro-dollars: one grammar for a trigger's ``run.maxCostUsd`` and the
deployment's ``PI_MAX_COST_USD``, read exactly (no float ever rounds a cap)."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

# A plain decimal: no sign, exponent, leading zero or whitespace; at most 7 integer digits, 6 decimals.
_USD_RE = re.compile(r"(0|[1-9][0-9]{0,6})(\.[0-9]{1,6})?")
MICROS_PER_USD = 1_000_000
MAX_USD_MICROS = 1_000_000 * MICROS_PER_USD
USD_ACCEPTED = ("a dollar amount above 0 and at most 1000000 with at most 6 decimals, "
                "written as a plain decimal")


def usd_micros(value: Any) -> int | None:
    """A dollar amount in integer micro-dollars, or None when refused.

    A string is read as written. A number is read by the decimal it denotes (JSON already turned the
    operator's characters into a float): ``1e2`` is 100, ``1e-7`` has seven decimals and is refused.
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, float):
        text = format(Decimal(repr(value)), "f")
    else:
        return None
    match = _USD_RE.fullmatch(text)
    if match is None:
        return None
    fraction = (match.group(2) or ".")[1:].ljust(6, "0")
    micros = int(match.group(1)) * MICROS_PER_USD + int(fraction)
    return micros if 0 < micros <= MAX_USD_MICROS else None


def lower_cap(deployment: int | None, job: int | None) -> int | None:
    """The cap one job runs under: a job's own cap may only lower the deployment's, never raise it."""
    if deployment is None or job is None:
        return job if deployment is None else deployment
    return min(deployment, job)
