"""PNG figures of a report: eval accuracy against samples, time to train per set, throughput per
set, and throughput per eval interval along each run.

Every figure is FIGURE_SIZE_PX pixels, whatever the data, so that reports
line up side by side (no tight bounding box, which would change the size).
One colour per result set, the same in every figure. A set's label is broken
into lines of at most LABEL_WIDTH characters, so that a long one (a rerun's,
with its folder) leaves the axes their room.
"""

from __future__ import annotations

import os
import re
from typing import List, Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from . import ReportInputError
from .systems import MAX_DROPPED_RUNS, ResultSet

FIGURE_SIZE_PX = (1200, 800)
DPI = 100
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


LABEL_WIDTH = 40


def _colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def _wrapped(label: str) -> str:
    """The label in lines of at most LABEL_WIDTH characters, broken after a space, '/' or '-' where it can be and
    anywhere where it cannot; only line breaks are added (joined without them, the lines are the label)."""
    lines = [""]
    for piece in re.findall(r"[^ /-]*[ /-]?", label):
        while piece:
            if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > LABEL_WIDTH:
                lines.append("")
            room = LABEL_WIDTH - len(lines[-1])
            lines[-1] += piece[:room]
            piece = piece[room:]
    return "\n".join(lines)


def _figure() -> Figure:
    fig = Figure(figsize=(FIGURE_SIZE_PX[0] / DPI, FIGURE_SIZE_PX[1] / DPI), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _set_handles(sets: Sequence[ResultSet]) -> List[Line2D]:
    """Legend entries of the per-run curves, one per set, saying where sample counts are inferred."""
    handles = []
    for i, s in enumerate(sets):
        inferred = any(r.eval_samples_inferred for r in s.runs)
        label = s.label + (" (eval sample counts inferred from train_samples)" if inferred else "")
        handles.append(Line2D([], [], color=_colour(i), marker="o", label=_wrapped(label)))
    return handles


def _accuracy_figure(sets: Sequence[ResultSet], target: float) -> Figure:
    fig = _figure()
    full, zoom = fig.subplots(2, 1)
    fig.suptitle("Eval accuracy against training samples, every run (dotted: did not converge)",
                 fontsize=15)
    zoom_low = target - 0.02
    zoom_start = None
    for i, s in enumerate(sets):
        for run in s.runs:
            points = [(p.samples / 1e6, p.accuracy) for p in run.evals if p.samples is not None]
            if not points:
                continue
            x, y = zip(*points)
            style = "-" if run.converged else ":"
            for ax in (full, zoom):
                ax.plot(x, y, style, marker="o", markersize=3, linewidth=1.2,
                        color=_colour(i), alpha=0.75)
            # The zoomed panel starts one eval before any run enters its accuracy band.
            for k, (_, acc) in enumerate(points):
                if acc >= zoom_low:
                    start = points[max(k - 1, 0)][0]
                    zoom_start = start if zoom_start is None else min(zoom_start, start)
                    break
    for ax in (full, zoom):
        ax.axhline(target, color="black", linestyle="--", linewidth=1)
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("training samples (millions)", fontsize=11)
        ax.set_ylabel("masked-LM accuracy", fontsize=11)
    full.set_title("whole run", fontsize=12)
    zoom.set_title(f"near the target ({target:g}, dashed)", fontsize=12)
    zoom.set_ylim(zoom_low, target + 0.004)
    if zoom_start is not None:
        zoom.set_xlim(left=zoom_start)
    handles = _set_handles(sets)
    handles.append(Line2D([], [], color="black", linestyle="--", label=f"target {target:g}"))
    full.legend(handles=handles, loc="lower right", fontsize=10)
    return fig


def _time_figure(sets: Sequence[ResultSet]) -> Figure:
    fig = _figure()
    ax = fig.subplots()
    # Titles are the figure's, centred on it: an axes title is centred on the axes, which long set labels push
    # right, past the figure's edge.
    fig.suptitle("Time to train per run\n(filled: counted in the olympic mean; hollow: trimmed; "
                 "x: did not converge; bar: score)", fontsize=13)
    for row, s in enumerate(sets):
        y = len(sets) - 1 - row
        times = sorted(s.times_min)
        trimmed_hi = MAX_DROPPED_RUNS - s.dropped
        for k, t in enumerate(times):
            counted = s.score_min is not None and MAX_DROPPED_RUNS <= k < len(times) - trimmed_hi
            # Runs that converge at the same eval take the same time; a small vertical
            # spread keeps every one of them visible.
            spread = 0.04 * (k - (len(times) - 1) / 2)
            ax.plot(t, y + spread, "o", markersize=8, color=_colour(row),
                    markerfacecolor=_colour(row) if counted else "white")
        for run in s.runs:
            if not run.converged and run.time_to_train_min is not None:
                ax.plot(run.time_to_train_min, y, "x", markersize=10, color="black")
        if s.score_min is not None:
            ax.plot([s.score_min] * 2, [y - 0.32, y + 0.32], color=_colour(row), linewidth=3)
            ax.annotate(f"score {s.score_min:.3f} min  ({len(s.converged_runs)}/{len(s.runs)} converged)",
                        (s.score_min, y + 0.34), ha="center", va="bottom", fontsize=11)
        elif times:
            ax.annotate(f"no score: {s.dropped} of {len(s.runs)} runs did not converge",
                        (sum(times) / len(times), y + 0.34), ha="center", va="bottom", fontsize=11)
    ax.set_yticks(range(len(sets)), [_wrapped(s.label) for s in reversed(sets)], fontsize=11)
    ax.set_ylim(-0.7, len(sets) - 0.3)
    ax.set_xlabel("time to train (minutes, run_start to run_stop)", fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


THROUGHPUTS = [
    ("throughput_effective", "effective (whole run)"),
    ("throughput_steady", "steady (median eval interval)"),
    ("throughput_train_only", "train-only (evals excluded)"),
]


def _throughput_figure(sets: Sequence[ResultSet]) -> Figure:
    fig = _figure()
    per_acc = any(s.accelerators for s in sets)
    axes = fig.subplots(1, 2, sharey=True) if per_acc else [fig.subplots()]
    fig.suptitle("Throughput per set (bars: mean of converged runs; black ticks: single runs)",
                 fontsize=15)
    height = 0.8 / len(THROUGHPUTS)
    for ax, divide in zip(axes, (False, True)):
        for row, s in enumerate(sets):
            base = len(sets) - 1 - row
            scale = s.accelerators if divide else 1
            if not scale:
                ax.text(0.02, base, "accelerator count unknown\n(no systems/<system>.json)",
                        transform=blended_transform_factory(ax.transAxes, ax.transData),
                        va="center", fontsize=10, color="dimgray")
                continue
            if not s.converged_runs:
                ax.text(0.02, base, "no converged run: no throughput to show",
                        transform=blended_transform_factory(ax.transAxes, ax.transData),
                        va="center", fontsize=10, color="dimgray")
                continue
            for k, (attr, _) in enumerate(THROUGHPUTS):
                y = base + 0.4 - height * (k + 0.5)
                values = [getattr(r, attr) for r in s.converged_runs]
                values = [v / scale for v in values if v is not None]
                if not values:
                    continue
                mean = sum(values) / len(values)
                ax.barh(y, mean, height=height * 0.9, color=_colour(row),
                        alpha=1.0 - 0.3 * k, edgecolor="black", linewidth=0.5)
                ax.plot(values, [y] * len(values), "|", color="black", markersize=8)
                ax.annotate(f" {mean:,.0f}", (max(values), y), va="center", fontsize=10)
        ax.set_xlabel("samples/s per accelerator" if divide else "samples/s (all accelerators)",
                      fontsize=11)
        ax.grid(True, axis="x", alpha=0.3)
        ax.margins(x=0.15)
        ax.set_xlim(left=0)
    axes[0].set_yticks(range(len(sets)), [_wrapped(s.label) for s in reversed(sets)], fontsize=11)
    axes[0].set_ylim(-0.6, len(sets) - 0.4)
    legend = [Line2D([], [], color="grey", alpha=1.0 - 0.3 * k, linewidth=8, label=name)
              for k, (_, name) in enumerate(THROUGHPUTS)]
    fig.legend(handles=legend, loc="outside lower center", ncols=len(THROUGHPUTS), fontsize=11,
               title="bars of each set, top to bottom")
    return fig


def _interval_figure(sets: Sequence[ResultSet]) -> Figure:
    fig = _figure()
    ax = fig.subplots()
    fig.suptitle("Throughput per eval interval, every run\n(each point: samples/s between two evals, "
                 "plotted at the later one; the first interval starts at run_start)", fontsize=13)
    for i, s in enumerate(sets):
        for run in s.runs:
            rates = run.interval_rates
            samples = [p.samples / 1e6 for p in run.evals if p.samples is not None][:len(rates)]
            if rates:
                ax.plot(samples, rates, "-", marker="o", markersize=3, linewidth=1,
                        color=_colour(i), alpha=0.7)
    ax.set_xlabel("training samples (millions)", fontsize=11)
    ax.set_ylabel("samples/s (all accelerators)", fontsize=11)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(handles=_set_handles(sets), loc="lower right", fontsize=10)
    return fig


def write_plots(sets: Sequence[ResultSet], directory: str, target: float) -> List[str]:
    """Write the figures into `directory` (created if needed); returns their paths."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise ReportInputError(f"{directory}: cannot create plot directory: {exc.strerror or exc}") from None
    figures = {
        "accuracy_vs_samples.png": _accuracy_figure(sets, target),
        "time_to_train.png": _time_figure(sets),
        "throughput.png": _throughput_figure(sets),
        "interval_throughput.png": _interval_figure(sets),
    }
    paths = []
    for name, fig in figures.items():
        path = os.path.join(directory, name)
        try:
            fig.savefig(path, dpi=DPI)
        except OSError as exc:
            raise ReportInputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        paths.append(path)
    return paths
