"""Small statistics the advice needs, in the standard library (no scipy in the core).

- :func:`chi2_quantile`: the chi-square quantile, from the regularised lower incomplete
  gamma function (series below ``a + 1``, Lentz's continued fraction above: Numerical
  Recipes §6.2) and a bisection, to about 1e-12 relative.
- :func:`poisson_rate_interval`: the exact (Garwood) interval of a Poisson rate from
  ``k`` events in ``exposure`` time units: few events give a wide interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["chi2_quantile", "gamma_p", "poisson_rate_interval", "quantile"]

_EPS = 1e-15
_ITERATIONS = 500


def gamma_p(a: float, x: float) -> float:
    """The regularised lower incomplete gamma function P(a, x), ``a > 0``, ``x >= 0``."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(_ITERATIONS):
            ap += 1.0
            term *= x / ap
            total += term
            if abs(term) < abs(total) * _EPS:
                break
        return min(1.0, total * math.exp(log_front))
    # Continued fraction for Q(a, x) = 1 - P(a, x) (modified Lentz).
    tiny = 1e-300
    b = x + 1.0 - a
    c = 1.0 / tiny
    d = 1.0 / b
    h = d
    for i in range(1, _ITERATIONS):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _EPS:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def chi2_quantile(p: float, dof: float) -> float:
    """The ``p`` quantile of the chi-square distribution with ``dof`` degrees of freedom."""
    if not 0.0 < p < 1.0:
        if p == 0.0:
            return 0.0
        raise ValueError(f"p must be in [0, 1), got {p}")
    a = dof / 2.0
    lo, hi = 0.0, max(1.0, 2.0 * a)
    while gamma_p(a, hi) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if gamma_p(a, mid) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return lo + hi  # 2 x the gamma quantile (chi-square = 2 Gamma(dof/2, 1))


def poisson_rate_interval(
    events: int, exposure: float, confidence: float = 0.95
) -> tuple[float, float]:
    """The exact two-sided interval of a Poisson rate (events per unit of ``exposure``).

    Lower: chi2((1 - c) / 2, 2k) / 2T (0 when k = 0); upper: chi2((1 + c) / 2, 2k + 2) / 2T.
    """
    if exposure <= 0.0:
        return 0.0, math.inf
    alpha = 1.0 - confidence
    low = 0.0 if events == 0 else chi2_quantile(alpha / 2.0, 2.0 * events) / (2.0 * exposure)
    high = chi2_quantile(1.0 - alpha / 2.0, 2.0 * events + 2.0) / (2.0 * exposure)
    return low, high


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics, as numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    below = math.floor(pos)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (pos - below)
