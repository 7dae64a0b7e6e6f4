"""The serving sweep's outputs: results/serving.csv, the serving section of summary.txt, plots.

The section's rules (steady state, SLO capacity) live in src/online/serving_rules.py, the plots in
src/online/serving_plots.py; this file writes the section and keeps the serve command's files when
a study run replaces OUT.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from src import outputs
from src.gamma_rule import SCHEDULE_TOLERANCE
from src.online.concurrency_report import concurrency_section
from src.online.schedule_note import SECTION_BEGIN, SECTION_END, with_schedule_note
from src.online.serving_plots import SWEEP_PLOTS
from src.online.serving_rules import (
    MARK,
    MARK_LEGEND,
    MAX_INTERPOLATION_RATIO,
    STEADY_WINDOW_E2E,
    capacity_text,
    duration_to_steady_s,
    rate_label,
    slo_capacity,
    slower_rates,
    with_steadiness,
)
from src.online.text_table import aligned_table as _table
from src.online.text_table import value_ci_text as _ci
from src.online.text_table import value_text as _fmt


def fixed_policies_label(policies) -> str:
    """What the hindsight best fixed gamma is the best of: none and the fixed:G policies run."""
    fixed = [p for p in policies if p == "none" or p.startswith("fixed:")]
    return "best of the fixed policies run: " + ", ".join(fixed)


def schedule_gammas_not_run(prep, policies) -> list[int]:
    """The schedule's gammas with no fixed:G policy among those run (0 counts as none)."""
    run = {0 if p == "none" else int(p.split(":")[1]) for p in policies
           if p == "none" or p.startswith("fixed:")}
    return sorted({int(g) for _, _, g in prep.schedule.ranges} - run)


def _acceptance_label(cfg, prep) -> str:
    """The acceptance mode that ran, saying so where it is per-position (with its rates)."""
    if prep.hazard_profile is None:
        return cfg.alpha_mode
    rates = ", ".join(f"{a:.2f}" for a in cfg.alpha.rates)
    return (f"{cfg.alpha_mode} (per-position: conditional rates a1..a{len(cfg.alpha.rates)} = "
            f"{rates}, later positions reuse the last; the adaptive policy still estimates one "
            "i.i.d. alpha per request)")


def steady_line(t: pd.DataFrame, rates) -> str:
    """The summary's line on each rate's arrival window and which (policy, rate) are steady."""
    windows = ", ".join(
        f"{rate_label(x)}/s: {t[t.rate_per_s == x].arrival_window_s.iloc[0]:.0f} s"
        for x in rates)
    ratio = t.arrival_window_s / t.e2e_mean_s
    bad = t[~t.steady_state]
    if bad.empty:
        verdict = "every (policy, rate) here is one"
    else:
        by_rate = {}
        for _, row in bad.iterrows():
            by_rate.setdefault(row.rate_per_s, []).append(row.policy)
        verdict = "not steady (marked *): " + "; ".join(
            f"{rate_label(r)}/s "
            f"({'every policy' if len(ps) == t.policy.nunique() else ', '.join(ps)})"
            for r, ps in sorted(by_rate.items()))
        if (bad.arrival_window_s >= STEADY_WINDOW_E2E * bad.e2e_mean_s).any():  # too few requests
            verdict += (f" (fewer than {STEADY_WINDOW_E2E:g} requests a replication are not one at "
                        "any window)")
    return (
        f"Steady state: a (policy, rate) is one when its arrival window is at least "
        f"{STEADY_WINDOW_E2E:g}x its mean E2E latency (design.md section 15, 'Steady state'); "
        f"arrival windows {windows}; window / mean E2E from {ratio.min():.1f} to "
        f"{ratio.max():.0f}; {verdict}."
    )


def _mark(row) -> str:
    """MARK where the table row is not a steady state."""
    return "" if row.steady_state else MARK


def realised_line(t: pd.DataFrame, rates, replications: int) -> str:
    """The summary's line on the arrival rate each offered rate realised: requests / arrival
    window, mean over replications (random arrival counts can exceed the offered rate)."""
    none = t[t.policy == t.policy.iloc[0]].set_index("rate_per_s")
    cells = ", ".join(
        f"{rate_label(r)}/s: {none.requests[r] / replications / none.arrival_window_s[r]:.2f}/s"
        for r in rates)
    return f"Realised arrival rate (requests / arrival window, mean over replications): {cells}."




def schedule_label(cfg, prep) -> str:
    """What the section's schedule was optimised for (the policy `schedule` runs it)."""
    if cfg.schedule_json is not None:
        return ("Schedule optimised for: nothing here; it is the one given (--schedule), "
                "simulated under load in S1-S6.")
    top = max([int(k) for *_, k in prep.schedule.ranges] + [int(prep.default_gamma)])
    edge = (f" At batch 1 or in the schedule the best gamma is --max-gamma {cfg.max_gamma}: the "
            "optimum may lie above the grid: try --max-gamma "
            f"{min(2 * cfg.max_gamma, 32)}." if top >= cfg.max_gamma else "")
    return (f"Schedule optimised for: the steady state at this workload's mean context "
            f"({prep.mean_context_tokens:.0f} tokens: prompt plus half the output; no queueing, no "
            f"prefill), acceptance {cfg.alpha_mode}, switching gamma only where another is "
            f"modelled faster by more than {SCHEDULE_TOLERANCE:.0%} (src/gamma_rule.py); "
            "S1-S6 then simulate it under load (policy 'schedule')." + edge)


def summary_section(result: dict, cfg) -> str:
    """The serving section of summary.txt (between SECTION_BEGIN and SECTION_END)."""
    t = result["table"]
    if "steady_state" not in t:
        t = with_steadiness(t, cfg)
    prep = result["prepared"]
    policies = list(dict.fromkeys(t.policy))
    rates = sorted(t.rate_per_s.unique())
    sc = cfg.scenario
    per_rate = t[t.policy == "none"].sort_values("rate_per_s").requests / cfg.replications
    if per_rate.nunique() == 1:
        sent = f"{int(per_rate.iloc[0])} requests"
    else:
        sent = (f"the arrivals of {cfg.duration_s:g} s ({per_rate.iloc[0]:.0f} to "
                f"{per_rate.iloc[-1]:.0f} requests on average)")

    lines = [
        SECTION_BEGIN,
        f"Deployment: {sc.name} ({sc.target_model_id} + draft {sc.draft} on {sc.gpu_id}, tp "
        f"{sc.tp}), engine profile {cfg.engine_profile}"
        + (f", sampling at temperature {sc.study.temperature:g} (every step pays the sampler's "
           "probability traffic; acceptance as given at that temperature)."
           if sc.study.temperature > 0 else "."),
        f"Workload: {cfg.workload} ("
        + (cfg.workload_source.rstrip(".") if cfg.trace is not None  # a file name has dots
           else cfg.workload_source.split(".")[0])
        + "); arrivals "
        + ("from the trace" if cfg.trace is not None else cfg.arrival.label())
        + ("; acceptance from the trace's alpha column." if cfg.alpha_label == "trace"
           else f"; acceptance mode {_acceptance_label(cfg, prep)}."),
        f"Engine: max_num_seqs {cfg.limits.max_num_seqs}, max_num_batched_tokens "
        f"{cfg.limits.max_num_batched_tokens}, KV cache "
            f"{prep.deployments[0].kv_capacity_blocks * 16} "
        f"tokens without the draft, {prep.deployments[1].kv_capacity_blocks * 16} with it.",
        f"{cfg.replications} replications x {sent} per (policy, rate); values are means over "
        f"replications with {cfg.confidence:.0%} intervals [low, high].",
        f"SLO: TTFT <= {cfg.slo_ttft_s:g} s and TPOT <= {cfg.slo_tpot_s * 1e3:g} ms; a rate "
        f"meets it when {cfg.slo_attainment_target:.0%} of requests do.",
        steady_line(t, rates),
        realised_line(t, rates, cfg.replications),
        "Throughputs and goodput divide by the makespan, the drain after the last arrival "
        "included, so below capacity they sit near the realised arrival rate, usually under it "
        "(they can exceed the offered rate where the arrivals did).",
        f"Default gamma: {prep.default_gamma}, the steady-state closed form's best at batch 1 "
        "and this workload's mean context (design.md section 11, 'Steady-state closed form'; "
        "the simulated fixed-batch study, with contexts that grow, can pick a neighbouring gamma "
        f"within its CI); schedule: {prep.schedule.vllm_json()}",
        schedule_label(cfg, prep),
        "",
    ]
    lines.append("S1. TPOT p50 (ms) by policy and rate; speedup over none in parentheses; "
                 + MARK_LEGEND)
    rows = []
    for p in policies:
        r = [p]
        for rate in rates:
            row = t[(t.policy == p) & (t.rate_per_s == rate)].iloc[0]
            mark = "" if row.steady_state else MARK
            r.append(f"{row.tpot_p50_s * 1e3:.1f} ({row.tpot_p50_speedup:.2f}x){mark}")
        rows.append(r)
    lines += [_table(["policy"] + [f"{rate_label(x)}/s" for x in rates], rows), ""]
    lines.append(
        "S2. Where speculation is slower than none: every rate at which the policy's p50 "
        "speedup lies below 1 with its whole interval (not only from a rate on: a faster "
        "overloaded rate above does not hide one); " + MARK_LEGEND + " for the policy or none, "
        "so only unmarked rates say what sustained load does"
    )
    rows = []
    for p in policies:
        if p == "none":
            continue

        def cell(found):
            if not found:
                return "never in the grid"
            marks = [t[(t.rate_per_s == r) & t.policy.isin([p, "none"])].steady_state.all()
                     for r in found]
            return ", ".join(f"{rate_label(r)}/s" + ("" if ok else MARK)
                             for r, ok in zip(found, marks))

        rows.append([p, cell(slower_rates(t, p)), cell(slower_rates(t, p, "e2e_p50_speedup"))])
    lines += [_table(["policy", "TPOT p50", "E2E p50"], rows), ""]
    best_of = fixed_policies_label(policies)
    lines.append(
        "S3. Best policy per rate (lowest TPOT p50; highest goodput), and the hindsight "
        f"best fixed gamma ({best_of}); " + MARK_LEGEND + " for the policy named"
    )
    rows = []
    for rate in rates:
        g = t[t.rate_per_s == rate]
        by_tpot = g.loc[g.tpot_p50_s.idxmin()]
        by_good = g.loc[g.goodput_req_s.idxmax()]
        best_fixed = g.hindsight_best_fixed.iloc[0] or "-"
        fixed_row = g[g.policy == best_fixed]
        fixed_steady = fixed_row.steady_state.all()
        rows.append(
            [
                f"{rate_label(rate)}/s",
                f"{by_tpot.policy} ({by_tpot.tpot_p50_s * 1e3:.1f} ms){_mark(by_tpot)}",
                f"{by_good.policy} ({by_good.goodput_req_s:.2f} req/s){_mark(by_good)}",
                best_fixed + ("" if fixed_steady else MARK),
            ]
        )
    lines += [_table(["rate", "best TPOT p50", "best goodput", "best fixed (hindsight)"], rows), ""]
    lines.append(
        "S4. Gain over the hindsight best fixed gamma (its TPOT p50 / the policy's; > 1 = better; "
        f"{best_of}); " + MARK_LEGEND + " for the policy or the best fixed"
    )
    missing = schedule_gammas_not_run(prep, policies)
    if missing:
        lines.append(
            "    the schedule runs gamma " + ", ".join(map(str, missing)) + " with no fixed "
            "policy at it: a gain above 1 may only be that gamma's (add fixed:G to --policies)"
        )
    rows = []
    for p in policies:
        if p.startswith("fixed:"):
            continue
        g = t[t.policy == p].sort_values("rate_per_s")
        cells = []
        for _, row in g.iterrows():
            at = t[t.rate_per_s == row.rate_per_s]
            best = at[at.policy == (row.hindsight_best_fixed or "-")]
            steady = row.steady_state and best.steady_state.all()
            cells.append(_fmt(row.gain_over_best_fixed) + ("" if steady else MARK))
        rows.append([p] + cells)
    lines += [_table(["policy"] + [f"{rate_label(x)}/s" for x in rates], rows), ""]
    lines.append("S5. SLO capacity: the highest rate that meets the SLO, interpolated in log "
                 "rate between the last steady rate that meets it and the first miss where that "
                 f"miss is steady and at most {MAX_INTERPOLATION_RATIO:g}x higher, else the "
                 "bracket 'last meet-first miss' (design.md section 15, 'SLO capacity'); a meet "
                 "counts only where it is a steady state, a miss counts anywhere")
    target = cfg.slo_attainment_target
    steady = t.steady_state
    kind_none, cap_none, _ = slo_capacity(t, "none", target, steady)
    top_rate = max(rates)
    rows = []
    for p in policies:
        kind, c, miss = slo_capacity(t, p, target, steady)
        # a bound or bracket rather than an interpolated value on either side: no ratio
        known = kind == "between" and kind_none == "between"
        gain = f"{c / cap_none:.2f}x" if p != "none" and known else "-"
        hint = None
        open_ended = kind == "none" or (kind == "above" and np.isnan(miss))
        if open_ended:  # meets that are not steady leave the capacity open: how long a run?
            tp = t[t.policy == p]
            meets = tp[(tp.slo_attainment >= target) & ~tp.steady_state]
            hint = duration_to_steady_s(meets.e2e_mean_s) if len(meets) else None
        rows.append([p, capacity_text(kind, c, miss, top_rate, hint), gain])
    lines += [_table(["policy", "capacity", "vs none"], rows), ""]
    lines.append(
        "S6. Detail per (policy, rate): TTFT p50/p99 ms, TPOT p99 ms, E2E p50 s, output "
        "tok/s, goodput req/s, mean batch, KV use, accepted/proposed, mean gamma; "
        + MARK_LEGEND
    )
    lines.append(
        "    accepted/proposed = draft tokens the target accepted / draft tokens proposed; "
        "'-' where no draft runs (none)"
    )
    rows = []
    for _, row in t.iterrows():
        rows.append(
            [
                row.policy,
                rate_label(row.rate_per_s) + ("" if row.steady_state else MARK),
                f"{row.ttft_p50_s * 1e3:.0f}",
                f"{row.ttft_p99_s * 1e3:.0f}",
                f"{row.tpot_p99_s * 1e3:.1f}",
                f"{row.e2e_p50_s:.2f}",
                _ci(row, "output_throughput_tok_s", 0),
                _fmt(row.goodput_req_s),
                _fmt(row.mean_batch, 1),
                _fmt(row.kv_use),
                "-" if row.policy == "none" else _fmt(row.acceptance_rate),
                "-" if row.policy == "none" else _fmt(row.mean_gamma),
            ]
        )
    lines += [
        _table(
            [
                "policy",
                "rate",
                "TTFT50",
                "TTFT99",
                "TPOT99",
                "E2E50",
                "out tok/s",
                "goodput",
                "batch",
                "KV",
                "accepted/proposed",
                "gamma",
            ],
            rows,
        )
    ]
    lines.append(SECTION_END)
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` with its serving section replaced by `section` (appended when it has none)."""
    return outputs.replace_section(text, section, SECTION_BEGIN, SECTION_END)


def render(result: dict, cfg, existing_summary: str, plots: bool = True) -> dict[str, bytes]:
    """Every output file of the sweep: path relative to OUT -> bytes (the plots only if `plots`).
    summary.txt is the existing one (the study's) with its serving section replaced. A closed-loop
    run (cfg.concurrency) writes serving.csv and its own section (concurrency_report), no plots:
    the by-rate plots read rates."""
    if cfg.concurrency:
        t = result["table"]
        section = concurrency_section(t, cfg, SECTION_BEGIN, SECTION_END)
        return {"results/serving.csv": t.to_csv(index=False, float_format="%.6g",
                                                lineterminator="\n").encode(),
                "results/summary.txt": outputs.block_last(
                    replace_section(existing_summary, section)).encode()}
    t = with_steadiness(result["table"], cfg)
    section = summary_section({**result, "table": t}, cfg)
    files = {
        "results/serving.csv": t.to_csv(index=False, float_format="%.6g",
                                        lineterminator="\n").encode(),
        "results/summary.txt": outputs.block_last(with_schedule_note(
            replace_section(existing_summary, section))).encode(),
    }
    if plots:
        files.update({name: plot(t, cfg) for name, plot in SWEEP_PLOTS.items()})
    return files


SERVING_FILES = ("results/serving.csv", "plots/serving_latency_vs_rate.png",
                 "plots/serving_throughput_latency.png", "plots/serving_goodput.png",
                 "plots/serving_vllm_blog_check.png", "results/serving_vllm_blog_check.csv")


def serving_outputs(out_dir: str) -> tuple[dict[str, bytes], str | None]:
    """The serve command's files in OUT and the serving section of OUT/results/summary.txt, for a
    study run that replaces OUT's outputs as a set to keep (they come from another command)."""
    old = outputs.existing_outputs(out_dir)
    files = {k: v for k, v in old.items() if k in SERVING_FILES}
    summary = old.get("results/summary.txt", b"").decode("utf-8", "replace")
    section = None
    if SECTION_BEGIN in summary and SECTION_END in summary:
        body = summary.split(SECTION_BEGIN, 1)[1].split(SECTION_END, 1)[0]
        section = SECTION_BEGIN + body + SECTION_END
    return files, section
