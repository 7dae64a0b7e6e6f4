"""The serving sweep's plots (plots/): serving_latency_vs_rate.png (p50 and p90 TPOT and TTFT
against the request rate, one line per policy, 95% intervals as bands),
serving_throughput_latency.png (TPOT p50 against output throughput, one point per rate),
serving_goodput.png (requests per second meeting the SLO).
"""

from __future__ import annotations

import io

import numpy as np
import pandas as pd

from src.online.serving_rules import STEADY_WINDOW_E2E, rate_label
from src.reporting import pyplot


def _colors(policies):
    plt = pyplot()
    cmap = plt.get_cmap("tab10")
    return {p: ("black" if p == "none" else cmap(i % 10)) for i, p in enumerate(policies)}


_LINESTYLES = ["-", "-.", (0, (5, 1.5)), ":", (0, (3, 1, 1, 1, 1, 1))]
_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def _policy_style(policies) -> dict:
    """Colour, line style and marker per policy, each policy its own, so that policies with equal
    numbers (one line exactly under another) still show both."""
    colors = _colors(policies)
    styles = {}
    for i, p in enumerate(policies):
        if p == "none":
            styles[p] = dict(color="black", lw=2.2, ls="--", marker="o", ms=4)
        else:
            styles[p] = dict(color=colors[p], lw=1.5, ls=_LINESTYLES[i % len(_LINESTYLES)],
                             marker=_MARKERS[i % len(_MARKERS)], ms=5 if i % 2 else 4,
                             mfc="none" if i % 2 else colors[p])
    return styles


def _policy_lines(ax, t, key, scale, colors, label=True):
    styles = _policy_style(list(colors))
    for p, g in t.groupby("policy", sort=False):
        g = g.sort_values("rate_per_s")
        style = styles[p]
        ax.plot(g.rate_per_s, g[key] * scale, label=p if label else None, **style)
        lo, hi = g[f"{key}_ci_low"] * scale, g[f"{key}_ci_high"] * scale
        if np.isfinite(lo).all():
            ax.fill_between(g.rate_per_s, lo, hi, color=colors[p], alpha=0.15, lw=0)


def _plain_log_axis(ax, axis: str = "y") -> None:
    """Tick labels of a log axis as plain numbers (12, 20, 50), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    lo, hi = (ax.get_ylim() if axis == "y" else ax.get_xlim())
    # a range of about one decade has few major ticks (1, 2, 5): label minor ticks 3, 4, 6, 8 too
    few = hi / max(lo, 1e-300) < 20

    def minor(v, _):
        mantissa = round(v / 10 ** np.floor(np.log10(v)), 6)
        return f"{v:g}" if few and mantissa in (3, 4, 6, 8) else ""

    target.set_minor_formatter(FuncFormatter(minor))


def _png(fig) -> bytes:
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _title(cfg) -> str:
    sc = cfg.scenario
    return (
        f"{sc.target_model_id} + {sc.draft} on {sc.gpu_id} (tp {sc.tp}), "
        f"{cfg.engine_profile}, {cfg.workload}, {cfg.arrival_label} arrivals, "
        + ("trace alphas" if cfg.alpha_label == "trace" else f"acceptance {cfg.alpha_mode}")
    )


def _unsteady_note(t: pd.DataFrame) -> str:
    """A title line naming the rates that are not a steady state for some policy ('' if none)."""
    if "steady_state" not in t or t.steady_state.all():
        return ""
    rates = sorted(t[~t.steady_state].rate_per_s.unique())
    return ("\nnot a steady state (window < "
            f"{STEADY_WINDOW_E2E:g}x mean E2E) for some policy at: "
            + ", ".join(f"{rate_label(r)}/s" for r in rates))


def _shade_unsteady(ax, t: pd.DataFrame) -> list:
    """Grey bands (log-2 rate axis) over the rates that are not a steady state for some policy;
    returns the legend handle ([] if every rate is steady)."""
    if "steady_state" not in t or t.steady_state.all():
        return []
    lim = ax.get_xlim()
    band = None
    rates = sorted(t.rate_per_s.unique())
    # each band reaches halfway (in log rate) to the neighbouring rates, so that it never covers
    # a steady neighbour (half an octave beyond the ends)
    edges = ([rates[0] * 2 ** -0.5] + [np.sqrt(a * b) for a, b in zip(rates, rates[1:])]
             + [rates[-1] * 2 ** 0.5])
    for i, r in enumerate(rates):
        if t[t.rate_per_s == r].steady_state.all():
            continue
        span = ax.axvspan(edges[i], edges[i + 1], color="0.85", alpha=0.5, lw=0, zorder=0,
                          label="not a steady state" if band is None else "_nolegend_")
        band = band or span
    ax.set_xlim(lim)
    return [band]


def _rate_ticks(ax, rates) -> None:
    """One labelled tick per rate on a log-2 axis; rates closer than 1.5x apart (32, 40, 48)
    would run into each other, so their labels are smaller and turned."""
    ax.set_xticks(rates)
    close = len(rates) > 1 and min(b / a for a, b in zip(rates, rates[1:])) < 1.5
    ax.set_xticklabels([rate_label(r) for r in rates], fontsize=8 if close else None,
                       rotation=45 if close else 0)


def plot_latency_vs_rate(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    colors = _colors(policies)
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharex=True)
    panels = [
        ("tpot_p50_s", "TPOT p50 (ms)"),
        ("tpot_p90_s", "TPOT p90 (ms)"),
        ("ttft_p50_s", "TTFT p50 (ms)"),
        ("ttft_p90_s", "TTFT p90 (ms)"),
    ]
    for ax, (key, label) in zip(axes.ravel(), panels):
        _policy_lines(ax, t, key, 1e3, colors)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        _plain_log_axis(ax)
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        rates = sorted(t.rate_per_s.unique())
        _rate_ticks(ax, rates)
    for ax in axes[1]:
        ax.set_xlabel("request rate (requests/s)")
    for ax, slo_ms in ((axes[0, 1], cfg.slo_tpot_s * 1e3), (axes[1, 1], cfg.slo_ttft_s * 1e3)):
        handles = [ax.axhline(slo_ms, color="grey", lw=1, ls=":", label="SLO")]
        handles += _shade_unsteady(ax, t)
        ax.legend(handles=handles, fontsize=8, loc="upper left")
    axes[0, 0].legend(fontsize=9, title="policy", title_fontsize=9)
    for ax in axes[:, 0]:
        _shade_unsteady(ax, t)  # after the policy legend, which would list every band
    fig.suptitle(
        f"Latency against request rate (bands: {cfg.confidence:.0%} CI; dotted: SLO, on the p90 "
        f"panels: a rate meets the SLO when {cfg.slo_attainment_target:.0%} of requests meet "
        f"both){_unsteady_note(t)}\n{_title(cfg)}", fontsize=10
    )
    fig.tight_layout()
    return _png(fig)


def plot_throughput_latency(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    styles = _policy_style(policies)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    for p, g in t.groupby("policy", sort=False):
        g = g.sort_values("rate_per_s")
        ax.plot(g.output_throughput_tok_s, g.tpot_p50_s * 1e3, label=p,
                **styles[p])
    last = t[t.policy == "none"].sort_values("rate_per_s")
    for _, row in last.iterrows():
        ax.annotate(
            f"{rate_label(row.rate_per_s)}/s",
            (row.output_throughput_tok_s, row.tpot_p50_s * 1e3),
            textcoords="offset points",
            xytext=(4, -10),
            fontsize=8,
            color="black",
        )
    ax.set_xlabel("output throughput (tokens/s)")
    ax.set_ylabel("TPOT p50 (ms)")
    ax.set_yscale("log")
    _plain_log_axis(ax)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, title="policy (points: rates)", title_fontsize=9)
    ax.set_title(f"Latency-throughput trade-off{_unsteady_note(t)}\n{_title(cfg)}", fontsize=10)
    return _png(fig)


def plot_goodput(t: pd.DataFrame, cfg) -> bytes:
    plt = pyplot()
    policies = list(dict.fromkeys(t.policy))
    colors = _colors(policies)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    _policy_lines(ax, t, "goodput_req_s", 1.0, colors)
    rates = sorted(t.rate_per_s.unique())
    ax.plot(rates, rates, color="grey", lw=1, ls=":", label="offered rate")
    ax.set_xscale("log", base=2)
    _shade_unsteady(ax, t)
    ax.set_yscale("log")
    _plain_log_axis(ax)
    _rate_ticks(ax, rates)
    ax.set_xlabel("request rate (requests/s)")
    ax.set_ylabel("goodput (requests/s meeting the SLO)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, title="policy", title_fontsize=9)
    ax.set_title(
        f"Goodput, SLO TTFT <= {cfg.slo_ttft_s:g} s and TPOT <= {cfg.slo_tpot_s * 1e3:g} ms"
        f" (over the makespan, drain included){_unsteady_note(t)}\n{_title(cfg)}",
        fontsize=10,
    )
    return _png(fig)


SWEEP_PLOTS = {
    "plots/serving_latency_vs_rate.png": plot_latency_vs_rate,
    "plots/serving_throughput_latency.png": plot_throughput_latency,
    "plots/serving_goodput.png": plot_goodput,
}

