"""Every figure of the project, drawn from data already read (this module reads no run files).

Plasticity analysis: distribution per group and plasticity against depth (Fig. 3), bounds against
depth (Fig. 6). Report: relative gain over linear probing (Fig. 2), average accuracy with the
pooled standard error (Fig. 17), accuracy spread over learning rates and seeds (Figs. 4 and 18),
gradient norm and validation loss curves (Fig. 4), and beyond the paper, accuracy against
trainable parameters with the Pareto front (:func:`pareto_figure`) and plasticity through pretraining
(:func:`plot_during_training`). Drawn on matplotlib ``Figure``
objects (no pyplot, no global backend state), coloured and labelled from
:mod:`plasticity.components` (configurations beyond the paper by their kind), and written
atomically as PNG by :func:`save`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.artist import setp
from matplotlib.figure import Figure
from matplotlib.text import Text

from plasticity.components import COLORS, GROUPS, color, label, strategy_of
from plasticity.report.tables import AVERAGE, Cells, column_labels, ordered_groups, partial_averages, pooled_se
from plasticity.runs.io import atomic_path

if TYPE_CHECKING:
    from plasticity.measure import RunningStats

__all__ = ["accuracy_figure", "pareto_figure", "place_labels", "plot_bounds", "plot_curves", "plot_depth",
           "plot_distribution", "plot_during_training", "plot_relative_gain", "plot_spread", "save", "strategy_color"]

BOUND_STYLES = {"prop1": "-", "prop2": "-", "prop3_rms": "-", "prop3_max": "--", "prop4": ":"}
"""Line style per bound (Prop. 3 at the largest token radius dashed, Prop. 4 dotted)."""


KIND_STYLES = {"group": ("o", "paper single group"), "full": ("P", "full finetuning"), "head": ("X", "SGD head"),
               "combination": ("s", "combination"), "lora": ("^", "LoRA"), "auto": ("*", "auto (plasticity-chosen)"),
               "probe": ("D", "linear probe (logistic regression)")}
"""Strategy -> (marker, legend name) of :func:`pareto_figure`; another strategy gets ``v`` and its name."""
KIND_COLORS = {"combination": "tab:olive", "lora": "tab:pink", "auto": "goldenrod", "probe": "dimgray"}
"""Colour of a configuration beyond the paper, by its kind."""


def strategy_color(tag: str) -> str:
    """The colour of a configuration: the paper's groups their own (:func:`plasticity.components.color`),
    the others their kind's (:data:`KIND_COLORS`), black when unknown."""
    return COLORS[tag] if tag in COLORS else KIND_COLORS.get(strategy_of(tag), "k")


def save(fig: Figure | None, path: str | Path) -> bool:
    """Writes the figure as PNG atomically (``bbox_inches="tight"`` keeps outside legends); True. None (a
    figure with nothing to draw): nothing written, False."""
    if fig is None:
        return False
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    return True


# ----------------------------------------------------------------------- plasticity analysis


def plot_distribution(stats: "RunningStats", path: str | Path, title: str = "") -> None:
    """Density of log10(rate) per group, pooled over blocks (from the streaming histograms)."""
    from plasticity.measure import HIST_BINS, HIST_RANGE  # torch: only where this figure is drawn

    hist = stats.hist.cpu().numpy()
    edges = np.linspace(*HIST_RANGE, HIST_BINS + 1)
    centers = 0.5 * (edges[1:] + edges[:-1])
    ax = Figure(figsize=(6, 3.5)).subplots()
    for group in GROUPS:
        counts = hist[[i for i, (g, _) in enumerate(stats.keys) if g == group]].sum(axis=0)
        if counts.sum() == 0:
            continue
        used = np.nonzero(counts)[0]
        lo, hi = max(used[0] - 5, 0), min(used[-1] + 6, HIST_BINS)
        density = counts / counts.sum() / (edges[1] - edges[0])
        ax.plot(10 ** centers[lo:hi], density[lo:hi], color=color(group), label=label(group))
    ax.set_xscale("log")
    ax.axvline(1.0, color="gray", lw=0.8, ls="--")
    ax.set(xlabel="rate of change ||f(x) - f(y)|| / ||x - y||", ylabel="density (per decade)")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    save(ax.figure, path)


def _group_lines(ax, points: dict[str, list[tuple[float, float]]], **style) -> None:
    """A line through the (x, y) points of each group that has some, in :data:`GROUPS` order, in the
    group's colour and with its label; ``style``: more ``Axes.plot`` arguments."""
    for group in (g for g in GROUPS if points.get(g)):
        x, y = zip(*points[group])
        ax.plot(x, y, color=color(group), label=label(group), **style)


def plot_depth(rows: list[dict], path: str | Path, title: str = "") -> None:
    """Mean plasticity per block against depth in percent, with the 95% CI of the mean."""
    ax = Figure(figsize=(6, 3.5)).subplots()
    by = {g: sorted((r for r in rows if r["group"] == g), key=lambda r: r["block"]) for g in GROUPS}
    _group_lines(ax, {g: [(r["depth_pct"], r["mean"]) for r in mine] for g, mine in by.items()}, marker="o", ms=3)
    for group, mine in ((g, mine) for g, mine in by.items() if mine):
        ax.fill_between([r["depth_pct"] for r in mine], [r["ci95_low"] for r in mine], [r["ci95_high"] for r in mine],
                        color=color(group), alpha=0.2)
    ax.set_yscale("log")
    ax.set(xlabel="depth (%)", ylabel="plasticity P(f)")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    save(ax.figure, path)


def plot_bounds(rows: list[dict], path: str | Path) -> None:
    """Upper bounds per block against depth in percent, one line per (group, bound), like Fig. 6.

    Args:
        rows: Output of :func:`plasticity.bounds.block_bounds`.
        path: PNG file to write.
    """
    depth = max(row["block"] for row in rows) + 1
    ax = Figure(figsize=(7.5, 4)).subplots()
    for group, bound in dict.fromkeys((row["group"], row["bound"]) for row in rows):
        line = sorted((r["block"], r["value"]) for r in rows if (r["group"], r["bound"]) == (group, bound))
        ax.plot([100 * b / max(depth - 1, 1) for b, _ in line], [v for _, v in line],
                BOUND_STYLES.get(bound, "-"), marker="o", markersize=3, color=color(group),
                label=f"{label(group)} ({bound})")
    ax.set(yscale="log", xlabel="depth (%)", ylabel="upper bound on plasticity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    save(ax.figure, path)


# ------------------------------------------------------------------------------------ report


def _bars(ylabel: str, rows: list[dict], names: list[str], values: list[float], **kwargs):
    """A bar per row in its configuration's colour, the names rotated below; the axes and the bars."""
    ax = Figure(figsize=(4.5, 3) if len(rows) <= 7 else (0.6 * len(rows) + 1.5, 3)).add_subplot()  # wider: many bars
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    bars = ax.bar(names, values, color=[strategy_color(r["group"]) for r in rows], **kwargs)
    ax.tick_params(axis="x", rotation=30)
    return ax, bars


def plot_relative_gain(gains: list[dict], path: str | Path) -> None:
    """Bars of the average relative gain over linear probing per group (Fig. 2, right).

    Args:
        gains: :func:`plasticity.report.tables.relative_gain` rows (only ``average`` ones drawn).
        path: PNG file to write.
    """
    avg = [g for g in gains if g["dataset"] == AVERAGE]
    labels = column_labels([g["group"] for g in avg] + [g["baseline"] for g in avg if g.get("baseline")])
    ax, _ = _bars("relative gain over linear probing (%)", avg, [labels[g["group"]] for g in avg],
                  [g["gain_pct"] for g in avg])
    setp(ax.get_xticklabels(), horizontalalignment="right")
    save(ax.figure, path)


def accuracy_figure(rows: list[dict]) -> Figure:
    """Average test accuracy per group of :func:`plasticity.report.tables.table6` ``rows`` with the pooled
    standard error (Fig. 17). A configuration averaged over fewer datasets than the others
    (:func:`plasticity.report.tables.partial_averages`) is drawn hatched and pale, its label saying over how
    many: its bar is not an average comparable with the others."""
    avg = [r for r in rows if r["dataset"] == AVERAGE]
    labels = column_labels(r["group"] for r in avg)
    most, partial = partial_averages(rows)
    names = [labels[r["group"]] + (f"\n({partial[r['group']]} of {most} datasets)" if r["group"] in partial else "")
             for r in avg]
    ax, bars = _bars("average top-1 test accuracy (%)", avg, names, [r["mean"] for r in avg],
                     yerr=[pooled_se(rows, r["group"]) for r in avg], capsize=4)
    for bar, r in zip(bars, avg):
        if r["group"] in partial:
            bar.set(hatch="//", alpha=0.45, edgecolor="k")
    if partial:
        ax.set_title(f"hatched: averaged over fewer than the {most} datasets", fontsize=8)
    ax.set_ylim(max(0.0, min(r["mean"] for r in avg) - 5.0), None)
    return ax.figure


def plot_spread(cells: Cells, path: str | Path) -> None:
    """Box plot of the test accuracy over all learning rates and seeds per group, one panel per
    dataset (Figs. 4 left and 18)."""
    datasets = sorted({d for d, _, _ in cells})
    labels = column_labels(g for _, g, _ in cells)
    ncols = min(4, len(datasets))
    nrows = math.ceil(len(datasets) / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.8 * nrows))
    for i, dataset in enumerate(datasets):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        groups = ordered_groups(g for d, g, _ in cells if d == dataset)
        data = [[100.0 * r["test_acc"] for (d, g, _), rs in cells.items() if (d, g) == (dataset, group) for r in rs]
                for group in groups]
        ax.boxplot(data, tick_labels=[labels[g] for g in groups])
        ax.set_title(dataset, fontsize=9)
        ax.tick_params(axis="x", labelsize=7, rotation=45)
        ax.grid(True, axis="y", alpha=0.3)
    fig.supylabel("top-1 test accuracy (%)")
    fig.tight_layout()
    save(fig, path)


CURVE_PANELS = (("grad_norm", "gradient norm", "log"), ("val_loss", "validation loss", "linear"))
"""(curve key, axis label, y scale) of the two panels of :func:`plot_curves`."""


def plot_curves(curves: list[dict], dataset: str, path: str | Path) -> bool:
    """Gradient norm and validation loss against step per group (Fig. 4 middle and right).

    Args:
        curves: One dict per group: ``group``, ``lr``, and ``grad_norm`` and ``val_loss``, each a
            (steps, values) pair of arrays (empty when not logged).
        dataset: Named in the panel titles.
        path: PNG file to write.

    Returns:
        False, and nothing written, when no curve has any point.
    """
    axes = Figure(figsize=(9, 3.2)).subplots(1, len(CURVE_PANELS))
    for ax, (key, name, scale) in zip(axes, CURVE_PANELS):
        for curve in curves:
            steps, values = curve[key]
            if len(steps):
                name_lr = f"{curve.get('label', label(curve['group']))} (lr {curve['lr']:g})"
                ax.plot(steps, values, color=strategy_color(curve["group"]), label=name_lr)
        ax.set(xlabel="step", ylabel=name, yscale=scale, title=f"{dataset}: {name}")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7)
    return any(ax.lines for ax in axes) and save(axes[0].figure, path)


def pareto_figure(points: list[dict], dataset: str) -> Figure | None:
    """Test accuracy of each configuration against its trainable parameters (log scale), markers by
    strategy kind (:data:`KIND_STYLES`), the Pareto front as a step line, every point labelled (labels
    never overlap: :func:`place_labels`); None when no point has a positive parameter count.

    Args:
        points: :func:`plasticity.report.tables.strategies` rows of one dataset (``component``,
            ``strategy``, ``label``, ``trainable_params``, ``mean``, ``std``, ``pareto``).
        dataset: Named in the title.
    """
    shown = [p for p in points if isinstance(p.get("trainable_params"), (int, float)) and p["trainable_params"] > 0]
    if not shown:
        return None
    ax = Figure(figsize=(7, 4.2)).add_subplot()
    for kind in dict.fromkeys(p["strategy"] for p in shown):
        marker, name = KIND_STYLES.get(kind, ("v", kind))
        mine = [p for p in shown if p["strategy"] == kind]
        ax.errorbar([p["trainable_params"] for p in mine], [p["mean"] for p in mine],
                    yerr=[0.0 if math.isnan(p["std"]) else p["std"] for p in mine], fmt="none",
                    ecolor="gray", elinewidth=0.8, alpha=0.6)
        ax.scatter([p["trainable_params"] for p in mine], [p["mean"] for p in mine], marker=marker, s=55,
                   c=[strategy_color(p["component"]) for p in mine], edgecolors="k", linewidths=0.5, label=name,
                   zorder=3)
    front = sorted((p["trainable_params"], p["mean"]) for p in shown if p.get("pareto"))
    if front:
        ax.step([x for x, _ in front], [y for _, y in front], where="post", color="k", lw=1.0, ls="--",
                alpha=0.7, label="Pareto front", zorder=2)
    ax.set_xscale("log")
    ax.set(xlabel="trainable parameters", ylabel="top-1 test accuracy (%)",
           title=f"{dataset}: accuracy against trainable parameters")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    place_labels(ax, [((p["trainable_params"], p["mean"]), p["label"]) for p in shown])
    return ax.figure


LABEL_OFFSETS = tuple((r * dx, r * dy) for r in (1, 2, 3, 4, 6, 8, 11, 15)
                      for dx, dy in ((4, 4), (4, -10), (-4, 4), (-4, -10), (0, 8), (0, -14), (8, -3), (-8, -3)))
"""Where :func:`place_labels` tries a label, in points from its point: close first, in 8 directions."""


def place_labels(ax, points: list[tuple[tuple[float, float], str]]) -> None:
    """Labels each point at the first offset of :data:`LABEL_OFFSETS` where its text, as the renderer
    lays it out, overlaps no label already placed (the last offset, with a leader line, when none is
    free); labels further than the first ring get a thin line to their point."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = ax.figure
    renderer = (fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)).get_renderer()
    ax.get_xlim(), ax.get_ylim()  # the autoscaled limits, fixed before any label is measured
    placed = []
    for xy, text in points:
        for i, (dx, dy) in enumerate(LABEL_OFFSETS):
            note = ax.annotate(text, xy, textcoords="offset points", xytext=(dx, dy), fontsize=7,
                               ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top",
                               arrowprops=None if i < 8 else dict(arrowstyle="-", lw=0.5, color="gray"))
            note.update_positions(renderer)
            box = Text.get_window_extent(note, renderer)  # the label's text alone (Annotation's adds the line)
            if not any(box.overlaps(other) for other in placed) or i == len(LABEL_OFFSETS) - 1:
                placed.append(box)
                break
            note.remove()


def plot_during_training(panels: list[tuple[str, dict[int, dict[str, float]]]], path: str | Path) -> bool:
    """P(f) of each group (mean over blocks) against the training step, one curve per group in the
    paper's colours, one panel per run; log y when the values are positive and span a decade.

    Args:
        panels: (title, step -> group -> P(f)) per run (step 0: the random init).
        path: PNG file to write.

    Returns:
        False, and nothing written, when no panel has a point.
    """
    panels = [(title, curves) for title, curves in panels if curves]
    if not panels:
        return False
    axes = Figure(figsize=(6.5, 3.6 * len(panels))).subplots(len(panels), squeeze=False)[:, 0]
    for ax, (title, curves) in zip(axes, panels):
        points = {g: sorted((s, v[g]) for s, v in curves.items() if g in v) for g in GROUPS}
        _group_lines(ax, points, marker="o", ms=3)
        values = [v for mine in points.values() for _, v in mine]
        ax.set(xlabel="pretraining step (0: random init)", ylabel="plasticity P(f), mean over blocks",
               yscale="log" if values and min(values) > 0 and max(values) / min(values) >= 10 else "linear")
        ax.set_title(title, fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return save(axes[0].figure, path)
