"""The checkpoint-interval model: Young's first-order optimum, Daly's higher-order one, and
the expected share of useful time at an interval.

With exponential failures of mean ``mtbf`` (M), a blocking checkpoint cost ``delta`` (δ)
and a restart cost ``restart`` (R: down time, initialisation and restore until steps run
again), an interval of ``tau`` seconds of work between checkpoints gives (Daly 2006, eq. 20)
the expected wall time per unit of work

    M e^(R/M) (e^((τ + δ)/M) - 1) / τ,

whose inverse is the efficiency below. Its optimum is about √(2δM) (J. W. Young, "A first
order approximation to the optimum checkpoint interval", CACM 17(9), 1974); J. T. Daly,
"A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3), 2006, refines it when δ is not small against M.
"""

from __future__ import annotations

import math

__all__ = ["daly_interval", "efficiency", "young_interval"]


def young_interval(delta: float, mtbf: float) -> float:
    """Young's optimum: √(2 δ M) seconds of work between checkpoints."""
    return math.sqrt(2.0 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly's higher-order optimum (2006, eq. 37) of the work between checkpoints.

    √(2δM) [1 + ⅓ √(δ/2M) + ⅑ (δ/2M)] - δ for δ < 2M, else M.
    """
    if delta >= 2.0 * mtbf:
        return mtbf
    x = delta / (2.0 * mtbf)
    return math.sqrt(2.0 * delta * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta


def efficiency(tau: float, delta: float, mtbf: float, restart: float) -> float:
    """Expected useful share of running time at interval ``tau`` (Daly 2006, eq. 20).

    ``mtbf`` infinite (no failure): τ / (τ + δ).
    """
    if tau <= 0.0:
        return 0.0
    if not math.isfinite(mtbf):
        return tau / (tau + delta)
    try:
        wall = mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf)
    except OverflowError:
        return 0.0
    return tau / wall if wall > 0.0 else 0.0
