"""What both reports (the reference study's and a hardware scenario's) share: text tables,
descriptions of the configured distributions, plot axes, PNG and CSV bytes, atomic writes.

Every file is rendered in memory first; a run's outputs are then replaced as one set
(src/outputs.py), and single files such as README.md with `write_atomic` (temp file in the target
folder, then os.replace).
"""
from __future__ import annotations

import io
import os
import tempfile

import numpy as np
import pandas as pd

from src.config import (
    ALPHA_CLIP,
    BetaAlpha,
    FixedLength,
    LognormalLength,
    MixtureAlpha,
    NormalAlpha,
    PerPositionAlpha,
    PointAlpha,
    UniformAlpha,
    UniformLength,
)
from src.processes import stderr_line

FLOAT_FORMAT = "%.6g"


# --- text -----------------------------------------------------------------------------------------

def describe_alpha(dist) -> str:
    if isinstance(dist, PointAlpha):
        return f"alpha = {dist.value:g}"
    if isinstance(dist, NormalAlpha):
        return (f"alpha ~ Normal({dist.mean:g}, sd {dist.std:g}), clipped to "
                f"{ALPHA_CLIP[0]:g}..{ALPHA_CLIP[1]:g}")
    if isinstance(dist, UniformAlpha):
        return f"alpha ~ Uniform({dist.low:g}, {dist.high:g})"
    if isinstance(dist, BetaAlpha):
        return f"alpha ~ Beta({dist.a:g}, {dist.b:g})"
    if isinstance(dist, MixtureAlpha):
        parts = [f"{w:.0%} {describe_alpha(c).replace('alpha ~ ', '').replace('alpha = ', '')}"
                 for w, c in zip(dist.weights, dist.components)]
        return "mixture: " + " + ".join(parts)
    if isinstance(dist, PerPositionAlpha):
        if dist.scales:
            spread = f"per-request scales from {len(dist.scales)} recorded requests"
        elif dist.spread:
            spread = f"per-request scale s ~ lognormal(0, {dist.spread:g}) on the hazard"
        else:
            spread = "every request alike"
        if len(dist.rates) == 1:
            return f"alpha = {dist.rates[0]:.4g} (i.i.d.), {spread}"
        rates = ", ".join(f"{a:.3g}" for a in dist.rates)
        return f"per-position rates a_i = {rates} (later positions reuse the last), {spread}"
    return repr(dist)


def describe_length(dist) -> str:
    if isinstance(dist, FixedLength):
        return f"{dist.tokens} tokens"
    if isinstance(dist, UniformLength):
        return f"uniform {dist.low}..{dist.high} tokens"
    if isinstance(dist, LognormalLength):
        return (f"lognormal (median {dist.median:g}, sigma {dist.sigma:g}) clipped to "
                f"{dist.low}..{dist.high} tokens")
    return repr(dist)


def table(header: list[str], rows: list[list[str]], indent: str = "  ") -> str:
    """Plain-text table with right-aligned columns (first column left-aligned)."""
    cells = [header] + rows
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(header))]
    def fmt(row):
        return indent + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                                  for i, (c, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(header), indent + "  ".join("-" * w for w in widths)]
                     + [fmt(r) for r in rows])


def md_table(header: list[str], rows: list[list[str]]) -> str:
    """Markdown table (README and design.md blocks)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def ordered(df: pd.DataFrame, column: str) -> list:
    """The distinct values of a column in order of first appearance."""
    return list(dict.fromkeys(df[column]))


def reference_gamma(gammas) -> int:
    """Gamma used where a plot shows one: 4 if swept, else the swept gamma closest to 4."""
    return min(gammas, key=lambda g: (abs(g - 4), g))


# --- plots ----------------------------------------------------------------------------------------

def pyplot():
    """matplotlib.pyplot with the Agg backend (files, no screen), imported at the first plot: a run
    that draws nothing (--no-plots, refused input, an interrupted start) never loads matplotlib
    (about 0.45 s of CPU)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


FONT_PT = 9  # legends, annotations and panel titles: never smaller
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def gamma_styles(gammas) -> dict:
    """A colour and marker per gamma that can be told apart: the qualitative tab10 palette (ten
    distinct hues) with a different marker for each, so neighbouring gammas never look alike; past
    ten gammas, evenly spaced viridis colours with the markers repeating."""
    plt = pyplot()
    gammas = sorted(gammas)
    if len(gammas) <= 10:
        colors = [plt.cm.tab10(i) for i in range(len(gammas))]
    else:
        colors = list(plt.cm.viridis(np.linspace(0, 0.95, len(gammas))))
    return {g: (c, MARKERS[i % len(MARKERS)]) for i, (g, c) in enumerate(zip(gammas, colors))}


def log2_batch_axis(ax, batches):
    plt = pyplot()
    ax.set_xscale("log", base=2)
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("batch size (concurrent sequences, log2 scale)")


def decorate_speedup_axis(ax, batches, title: str, ylabel: str | None) -> None:
    """Line at 1.0 (no gain), log2 batch axis, title, y label on the first column, grid."""
    ax.axhline(1.0, color="black", lw=1, ls="--")
    log2_batch_axis(ax, batches)
    ax.set_title(title, fontsize=FONT_PT + 1)
    if ylabel:
        ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def legend_outside(fig, axes, title: str | None = None, **kwargs):
    """One legend for the figure, right of the panels, so it never covers data (constrained
    layout)."""
    handles, labels = axes.flat[0].get_legend_handles_labels()
    return fig.legend(handles, labels, loc="outside right center", fontsize=FONT_PT, title=title,
                      title_fontsize=FONT_PT, **kwargs)


def plot_speedup_grid(df: pd.DataFrame, row_column: str, row_label, title: str):
    """Speedup vs batch size, one panel per (row_column value, quality mode), a line per gamma with
    its confidence band; used for the reference study (rows: serving modes) and the hardware
    scenarios (rows: engine profiles)."""
    plt = pyplot()
    modes, rows = ordered(df, "quality_mode"), ordered(df, row_column)
    batches, gammas = sorted(df.batch_size.unique()), sorted(df.gamma.unique())
    fig, axes = plt.subplots(len(rows), len(modes),
                             figsize=(3.9 * len(modes) + 1.4, 3.6 * len(rows)),
                             sharex=True, sharey=True, squeeze=False, layout="constrained")
    styles = gamma_styles(gammas)
    for i, r in enumerate(rows):
        for j, m in enumerate(modes):
            ax = axes[i, j]
            for g in gammas:
                c, marker = styles[g]
                sub = df[(df.quality_mode == m) & (df[row_column] == r)
                         & (df.gamma == g)].sort_values("batch_size")
                ax.plot(sub.batch_size, sub.speedup, marker=marker, ms=4, color=c,
                        label=f"gamma {g}")
                ax.fill_between(sub.batch_size, sub.speedup_ci_low, sub.speedup_ci_high, color=c,
                                alpha=0.25)
            decorate_speedup_axis(ax, batches, f"{m}\n{row_label(r)}",
                                  "speedup over greedy (x)" if j == 0 else None)
            if i < len(rows) - 1:
                ax.set_xlabel("")
    legend_outside(fig, axes, "draft tokens\nper step\n(95% CI bands)")
    fig.suptitle(title)
    return fig


# --- files ----------------------------------------------------------------------------------------

def plot_progress(quiet: bool, label: str, total: int):
    """A callback printing `label: i/total plots (name)` on stderr after each plot (None when
    quiet)."""
    if quiet:
        return None
    done = [0]

    def progress(name: str) -> None:
        done[0] += 1
        stderr_line(f"  {label}: {done[0]}/{total} plots ({name})")

    return progress


def png_bytes(fig) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n").encode()


def umask_mode(mode: int = 0o666) -> int:
    """`mode` as the user's umask leaves it (what open() would give a new file)."""
    umask = os.umask(0)
    os.umask(umask)
    return mode & ~umask


def write_atomic(path: str, data: bytes) -> None:
    """Write to a temp file beside `path`, then rename over it (readers never see a partial file).
    The file keeps its permissions, or gets the umask's if it is new (mkstemp alone gives 0600)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else umask_mode()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
