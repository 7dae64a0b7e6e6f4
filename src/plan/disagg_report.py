"""The disaggregated rows of a plan: results/plan_disagg.csv and the plan section's P4-P6.

Per candidate (xPyD shape on a GPU x pair x engine x workload) and policy on the decode pool:

    capacity        = min(C_prefill(x), y x C_decode)  (src/plan/disagg_search.py), req/s
    bound_by        the pool whose capacity is the smaller ("prefill" or "decode")
    tokens/request  one decode worker's sustained output tok/s / its capacity (at capacity)
    cost_per_mtok   = price x GPUs of both pools / (3600 x capacity x tokens/request) x 1e6
    decode workers for the target rate T = ceil(T / C_decode) (the decode pool's size), and
    prefill workers = the fewest of the plan's prefill_workers whose C_prefill >= T

P5 compares, for the plan's SLO, the cheapest aggregated deployment with the cheapest
disaggregated one per million output tokens, without and with speculation; P6 says how much
the best policy moves one decode worker's capacity and so the decode pool's size.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

DISAGG_CSV_PATH = "results/plan_disagg.csv"


def _known(r: dict) -> bool:
    return r["bound"] != "unknown" and r["capacity_per_s"] > 0


def disagg_table(plan, entries, results: dict) -> pd.DataFrame:
    """One row per (candidate, policy); `results` by PoolTask."""
    rows = []
    for d, cand, by_policy in entries:
        price = plan.price(d.gpu)
        unit = price if price is not None else 1.0
        for policy, tasks in by_policy.items():
            dec, pre = results[tasks["decode"]], results[tasks["prefill"]]
            y = cand.decode_workers
            cp, cd = pre["capacity_per_s"], dec["capacity_per_s"]
            cap = min(cp, y * cd)
            bound_by = "prefill" if cp < y * cd else "decode"
            side = pre if bound_by == "prefill" else dec
            bound = ("unknown" if "unknown" in (pre["bound"], dec["bound"])
                     else "below" if cap <= 0 else side["bound"])
            at = dec["at_capacity"] or {}
            tok = at.get("sustained_output_tok_s", math.nan) / cd if cd > 0 else math.nan
            with np.errstate(all="ignore"):
                cost = (unit * cand.gpus / (3600.0 * cap * tok) * 1e6
                        if cap > 0 and np.isfinite(tok) else math.nan)
            row = {"gpu": d.gpu, "target": d.target, "draft": d.draft,
                   "engine_profile": d.engine, "workload": d.workload, "shape": cand.label(),
                   "prefill_workers": cand.prefill_workers, "prefill": cand.prefill.label(),
                   "decode_workers": y, "decode": cand.decode.label(), "gpus": cand.gpus,
                   "kv_link": cand.kv_link, "policy": dec["policy"],
                   "prefill_capacity_per_s": cp, "prefill_bound": pre["bound"],
                   "decode_capacity_per_worker_per_s": cd, "decode_bound": dec["bound"],
                   "decode_first_miss_per_s": dec["first_miss_per_s"],
                   "capacity_per_s": cap, "capacity_bound": bound, "bound_by": bound_by,
                   "output_tokens_per_request": tok, "cost_per_mtok": cost,
                   "cost_unit": "usd" if price is not None else "gpu_hours"}
            for k in ("ttft_p90_s", "tpot_p90_s", "acceptance_rate", "mean_gamma",
                      "mean_batch"):
                row[f"decode_{k}"] = at.get(k, math.nan)
            T = plan.target_rate_per_s
            row["decode_workers_for_target"] = (math.ceil(T / cd - 1e-9) if T and _known(dec)
                                                else math.nan)
            rows.append(row)
    return pd.DataFrame(rows)


def _r(v: float) -> str:
    return "-" if not np.isfinite(v) else (f"{v:.3g}" if v < 1000 else f"{v:.0f}")


def _grid(header, rows, indent="  ") -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: indent + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa
    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def _cheapest(t: pd.DataFrame, spec: bool):
    t = t[(t.policy != "none") if spec else (t.policy == "none")]
    t = t[(t.capacity_per_s > 0) & (t.capacity_bound != "unknown") & np.isfinite(t.cost_per_mtok)]
    return None if not len(t) else t.sort_values("cost_per_mtok", kind="stable").iloc[0]


def disagg_lines(plan, table: pd.DataFrame, agg: pd.DataFrame, skipped) -> list[str]:
    """P4-P6 of the plan section (module docstring); `agg`: report.plan_table's rows."""
    unit = "USD" if plan.prices_usd_per_gpu_hour else "GPU-hours"
    lines = ["P4. Disaggregated (xPyD) deployments: capacity = min(prefill pool's, decode workers"
             " x one decode worker's) (src/plan/disagg_search.py), cost per million output "
             f"tokens at capacity ({unit}):"]
    rows = [[f"{r.target}+{r.draft} {r.gpu} {r.engine_profile} {r.workload}", r.shape, r.gpus,
             r.policy, _r(r.prefill_capacity_per_s), _r(r.decode_capacity_per_worker_per_s),
             ("unknown" if r.capacity_bound == "unknown" else _r(r.capacity_per_s)),
             r.bound_by, _r(r.cost_per_mtok)] for r in table.itertuples()]
    lines.append(_grid(["deployment", "shape", "GPUs", "policy", "prefill/s", "decode/s/worker",
                        "capacity/s", "bound by", "cost/Mtok"], rows) if rows
                 else "  (no disaggregated candidate can run)")
    for d, cand, why in skipped:
        lines.append(f"  Skipped: {d.target}+{d.draft} {d.gpu} {cand.label()}: {why}")
    lines += ["", f"P5. Cheaper per million output tokens at the SLO (TTFT <= {plan.slo_ttft_s:g}"
              f" s, TPOT <= {plan.slo_tpot_s * 1e3:g} ms for {plan.slo_attainment_target:.0%}), "
              "aggregated vs disaggregated:"]
    for spec, name in ((False, "without speculation"), (True, "with speculation")):
        a, b = _cheapest(agg, spec), _cheapest(table, spec)
        left = "none" if a is None else (f"aggregated {a.target}+{a.draft} tp{a.tp} {a.gpu} "
                                         f"{a.policy}: {_r(a.cost_per_mtok)}")
        right = "none" if b is None else (f"disaggregated {b['shape']} {b.gpu} {b.policy}: "
                                          f"{_r(b.cost_per_mtok)}")
        verdict = ""
        if a is not None and b is not None:
            win = "aggregated" if a.cost_per_mtok <= b.cost_per_mtok else "disaggregated"
            lo, hi = sorted([a.cost_per_mtok, b.cost_per_mtok])
            verdict = f" -> {win} is cheaper by {1 - lo / hi:.0%}"
        lines.append(f"  {name}: {left}; {right}{verdict}")
    lines += ["", "P6. Speculation and the decode pool's size (one decode worker's capacity, "
              "none vs each policy" + (f"; decode workers for {_r(plan.target_rate_per_s)} "
                                       "requests/s" if plan.target_rate_per_s else "") + "):"]
    rows = []
    keys = ["gpu", "target", "draft", "engine_profile", "workload", "prefill", "decode"]
    for _, grp in table.drop_duplicates(keys + ["policy"]).groupby(keys, sort=False):
        base = grp[grp.policy == "none"].iloc[0]
        for r in grp[grp.policy != "none"].itertuples():
            cd0, cd1 = base.decode_capacity_per_worker_per_s, r.decode_capacity_per_worker_per_s
            known = "unknown" not in (base.decode_bound, r.decode_bound) and cd0 > 0
            gain = f"{cd1 / cd0:.2f}x" if known else "unknown"
            size = (f"{_r(base.decode_workers_for_target)} -> {_r(r.decode_workers_for_target)}"
                    if plan.target_rate_per_s else "-")
            rows.append([f"{r.target}+{r.draft} {r.gpu} {r.workload}",
                         f"P({r.prefill}) D({r.decode})", r.policy, _r(cd0), _r(cd1), gain,
                         size])
    lines.append(_grid(["deployment", "workers", "policy", "none/s", "policy/s", "gain",
                        "decode workers"], rows) if rows
                 else "  (no speculation policy, or no candidate)")
    return lines


def csv_bytes(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False, float_format="%.6g", lineterminator="\n").encode()
