"""Figures like the paper's: plasticity distribution per group and against depth (Fig. 3), bounds
against depth (Fig. 6). Drawn on matplotlib ``Figure`` objects (no pyplot, no global backend
state) and written atomically as PNG.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from plasticity.components import GROUPS
from plasticity.measure import HIST_BINS, HIST_RANGE, RunningStats
from plasticity.results import atomic_path

COLORS = {"ln1": "tab:blue", "mha": "tab:red", "ln2": "tab:cyan", "fc1": "tab:orange", "fc2": "tab:green",
          "all": "tab:purple", "head": "tab:gray"}
LABELS = {"ln1": "LN1", "mha": "MHA", "ln2": "LN2", "fc1": "FC1", "fc2": "FC2", "all": "full",
          "head": "linear probing"}
BOUND_STYLES = {"prop1": "-", "prop2": "-", "prop3_rms": "-", "prop3_max": "--", "prop4": ":"}


def plot_distribution(stats: RunningStats, path: str | Path, title: str = "") -> None:
    """Density of log10(rate) per group, pooled over blocks (from the streaming histograms)."""
    hist = stats.hist.cpu().numpy()
    edges = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    centers = 0.5 * (edges[1:] + edges[:-1])
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
    for group in GROUPS:
        counts = hist[[i for i, (g, _) in enumerate(stats.keys) if g == group]].sum(axis=0)
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
    save(fig, path)


def plot_depth(rows: list[dict], path: str | Path, title: str = "") -> None:
    """Mean plasticity per block against depth in percent, with the 95% CI of the mean."""
    fig = Figure(figsize=(6, 3.5))
    ax = fig.subplots()
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
    save(fig, path)


def plot_bounds(rows: list[dict], path: str | Path) -> None:
    """Upper bounds per block against depth in percent, one line per (group, bound), like Fig. 6.

    Args:
        rows: Output of :func:`plasticity.bounds.block_bounds`.
        path: PNG file to write.
    """
    depth = max(row["block"] for row in rows) + 1
    fig = Figure(figsize=(7.5, 4))
    ax = fig.subplots()
    for group, bound in dict.fromkeys((row["group"], row["bound"]) for row in rows):
        line = sorted((r["block"], r["value"]) for r in rows if (r["group"], r["bound"]) == (group, bound))
        ax.plot([100 * b / max(depth - 1, 1) for b, _ in line], [v for _, v in line],
                BOUND_STYLES.get(bound, "-"), marker="o", markersize=3, color=COLORS.get(group),
                label=f"{LABELS.get(group, group)} ({bound})")
    ax.set(yscale="log", xlabel="depth (%)", ylabel="upper bound on plasticity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save(fig, path)


def save(fig: Figure, path: str | Path) -> None:
    """Writes the figure as PNG atomically; ``bbox_inches="tight"`` keeps outside legends."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
