"""Growth of forward+backward time with the number of outputs: exponent fit and log-log plot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path


def fit_exponent(ns: Sequence[float], times: Sequence[float]) -> float:
    """Least-squares slope of log(time) against log(n): time ~ c * n**k, returns k (nan under two points)."""
    points = [(math.log(n), math.log(t)) for n, t in zip(ns, times) if n > 0 and t > 0]
    if len(points) < 2:
        return math.nan
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
    return sxy / sxx if sxx > 0 else math.nan


def plot_scaling(series: Mapping[str, Sequence[tuple[int, float]]], path: Path, title: str) -> Path | None:
    """Log-log plot of time (us) vs N, one line per strategy; None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on CI or a GPU box
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, points in series.items():
        if not points:
            continue
        ns, ts = zip(*sorted(points))
        k = fit_exponent(ns, ts)
        ax.loglog(ns, ts, marker="o", label=f"{label} (k={k:.2f})")
    ax.set_xlabel("outputs N (x.mul(2).unbind(0), x of shape (N, 256))")
    ax.set_ylabel("forward+backward time per call (us)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
