"""Numbers for people: the status shows 0.01251, not 0.012505800000000001."""

from __future__ import annotations

import math

SIGNIFICANT_DIGITS = 4


def significant(value: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``value`` rounded to ``digits`` significant digits (non-finite values unchanged)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value == 0:
        return value
    return float(f"{value:.{digits}g}")
