"""Plasticity figures like paper Fig. 3: the distribution of rates per group and P(f) against depth."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from plasticity.components import GROUPS  # noqa: E402
from plasticity.measure import HIST_BINS, HIST_RANGE, RunningStats  # noqa: E402

COLORS = {"ln1": "tab:blue", "mha": "tab:red", "ln2": "tab:cyan", "fc1": "tab:orange", "fc2": "tab:green"}
LABELS = {"ln1": "LN1", "mha": "MHA", "ln2": "LN2", "fc1": "FC1", "fc2": "FC2"}


def plot_distribution(stats: RunningStats, path: str | Path, title: str = "") -> None:
    """Density of log10(rate) per group, pooled over blocks (from the streaming histograms)."""
    hist = stats.hist.cpu().numpy()
    edges = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    centers = 0.5 * (edges[1:] + edges[:-1])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for group in GROUPS:
        rows = [i for i, (g, _) in enumerate(stats.keys) if g == group]
        if not rows:
            continue
        counts = hist[rows].sum(axis=0)
        if counts.sum() == 0:
            continue
        used = np.nonzero(counts)[0]
        lo, hi = max(used[0] - 5, 0), min(used[-1] + 6, HIST_BINS)
        density = counts / counts.sum() / (edges[1] - edges[0])
        ax.plot(10 ** centers[lo:hi], density[lo:hi], color=COLORS[group], label=LABELS[group])
    ax.set_xscale("log")
    ax.axvline(1.0, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="rate of change ||f(x) - f(y)|| / ||x - y||", ylabel="density (per decade)")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    _save(fig, path)


def plot_depth(rows: list[dict], path: str | Path, title: str = "") -> None:
    """Mean plasticity per block against depth in percent, with the 95% CI of the mean."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for group in GROUPS:
        mine = sorted((r for r in rows if r["group"] == group), key=lambda r: r["block"])
        if not mine:
            continue
        depth = [r["depth_pct"] for r in mine]
        ax.plot(depth, [r["mean"] for r in mine], marker="o", ms=3, color=COLORS[group], label=LABELS[group])
        ax.fill_between(depth, [r["ci95_low"] for r in mine], [r["ci95_high"] for r in mine],
                        color=COLORS[group], alpha=0.2)
    ax.set_yscale("log")
    ax.set(xlabel="depth (%)", ylabel="plasticity P(f)")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    _save(fig, path)


def _save(fig: plt.Figure, path: str | Path) -> None:
    tmp = Path(path).with_name(f".{Path(path).name}.tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")  # keeps a legend below the axes
    plt.close(fig)
    tmp.replace(path)
