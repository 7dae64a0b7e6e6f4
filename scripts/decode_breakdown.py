"""One disaggregated silicon_sample.csv row's decode-worker step, split by component.

    python scripts/decode_breakdown.py ROW_ID [ROW_ID ...] [--requests N]

For each row the deployment is mapped as `silicon-validate-disagg` maps it (src/disagg/silicon.py
map_row) and one greedy decode step of the decode worker is priced (src/attention_dp/worker.py
DecodeWorker) at N requests per worker (default: the validation's own steady-state occupancy,
src/disagg/closed_loop.py) at the mean context (sa-bench's mean ISL + OSL / 2). It prints:

- the TP-G pass (the cost model at tp = G = decode_tp x decode_dp, ep), as the cost model prices
  it: each dense GEMM of the pass (measured or roofline ms), the routed experts (measured table or
  roofline), the shared experts hidden behind them, the rest of the attention-free physics
  (elementwise, LM head's fixed parts...), attention, and the engine's host overhead;
- at decode_dp > 1 the attention-DP correction's terms (DecodeWorker.dp_correction_ms): attention
  over all N swapped for the busiest rank's n = ceil(N / dp), the replicated attention
  projections, the TP-G all-reduces dropped, the rank's all-reduce, the MoE all-to-all; and the
  step's engine overhead with the host CPU over the busiest rank's n, not N (DecodeWorker.rows_ms),
  in place of the TP-G pass's;
- the step, the predicted TPOT and the measured one.

A diagnostic, nothing is fitted: design.md's disaggregated validation block records what it found.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _mapped(row_id: str):
    from src.costmodel.presets import load_presets
    from src.disagg.silicon import load_disagg_rows, map_row
    rows = load_disagg_rows()
    hit = rows[rows.id == row_id]
    if hit.empty:
        raise SystemExit(f"no disaggregated row {row_id} in silicon_sample.csv")
    row = hit.iloc[0]
    mapped = map_row(row, load_presets())
    if isinstance(mapped, str):
        raise SystemExit(f"{row_id}: {mapped}")
    return row, mapped


def parts(worker, N: int, ctx: float) -> dict:
    """The decode worker's step of N requests at ctx cached tokens each, by component (ms)."""
    from src.costmodel import PassLoad
    from src.costmodel.roofline import pass_components_s
    cost, s = worker.cost, worker.shape
    out: dict = {"gemms": [], "moe": None}
    g = cost.kernels
    T = np.array([float(N)])
    if g is not None and g.shapes:
        roof, measured = g._priced_ms(T)
        for i, ((k, n), dtype, cnt) in enumerate(zip(g.shapes, g.dtypes, g.counts)):
            out["gemms"].append((k, n, cnt, dtype or "(roofline)", float(measured[i, 0]),
                                 float(roof[i, 0])))
        out["shared_hidden_ms"] = float(g.shared_hidden_ms(T, np.array([1.0]))[0])
    moe = g.moe if g is not None else None
    if moe is not None:
        d, meas, ok = moe.parts_ms(T, np.array([1.0]))
        out["moe"] = (moe.key, moe.dtype, moe.distribution, float(meas[0]),
                      float(moe.roofline_ms(T, np.array([1.0]))[0]), bool(ok[0]))
    comp = pass_components_s(cost._target_c, T, 1.0, T * ctx)
    out["roofline"] = {k: float(v[0]) * 1e3 for k, v in comp.items()}
    load = PassLoad.from_totals(np.array([N]), np.array([N * ctx]))
    physics, cpu, gpu = cost._target_parts(load, np.array([1]), check_fits=False)
    target, _ = cost.step_ms(load, np.array([0]), with_draft=False, check_fits=False)
    att = cost._attention_pnorm_ms(cost._target_c, T, T, 1, T * ctx)
    if cost.attention_kernels is not None:
        att = cost.attention_kernels.replace_ms(att, T, T * ctx, np.array([1]))
    out.update(tp_g_physics_ms=float(physics[0]), tp_g_attention_ms=float(att[0]),
               tp_g_step_ms=float(target[0]), tp_g_overhead_ms=float(target[0] - physics[0]))
    if s.dp > 1:
        n = np.ceil(T / s.dp)
        C = T * ctx
        c_rank = n * C / T
        tc, rc = cost._target_c, worker._rank_c
        a = cost._attention_pnorm_ms
        comm_r = 0.0
        if s.tp > 1:
            comm_r = float(pass_components_s(rc, n, 1.0, c_rank)["communication"][0]) * 1e3 / 2
        out["dp"] = {
            "rank requests n": float(n[0]),
            "- attention_G(N)": -float(a(tc, T, T, 1.0, C)[0]),
            "+ attention_rank(n)": float(a(rc, n, n, 1.0, c_rank)[0]),
            "- attn_gemms_G(N)": -float(worker.attention_gemms_ms(tc, s.gpus_per_worker, T)[0]),
            "+ attn_gemms_rank(n)": float(worker.attention_gemms_ms(rc, s.tp, n)[0]),
            "- communication_G(N)": -float(pass_components_s(tc, T, 1.0, C)["communication"][0])
            * 1e3,
            "+ all_reduce_rank(n) / 2": comm_r,
            "+ all_to_all(n)": float(worker.all_to_all_ms(n)[0]),
            "correction (sum)": float(worker.dp_correction_ms(T, C, np.array([0]))[0]),
        }
    out["step_ms"] = float(worker.step_ms(N, ctx, 0))
    if s.dp > 1:  # the host CPU over the rank's n, overlapped with the DP step's GPU time
        out["dp_overhead_ms"] = out["step_ms"] - out["tp_g_physics_ms"] - out["dp"][
            "correction (sum)"]
    return out


def report(row_id: str, requests: int | None) -> str:
    from src.attention_dp.worker import DecodeWorker
    from src.disagg.closed_loop import estimate
    from src.disagg.sa_bench import mean_length
    row, (scenario, disagg, isl, osl, conc) = _mapped(row_id)
    dec, pre = disagg.decode, disagg.prefill
    isl_m, osl_m = mean_length(isl), mean_length(osl)
    cost = replace(scenario, tp=dec.gpus_per_worker, ep=dec.ep).cost_model()
    worker = DecodeWorker(cost, dec)
    est = estimate(replace(scenario, tp=pre.gpus_per_worker, ep=pre.ep).cost_model(), worker,
                   disagg, isl_m, osl_m, conc)
    N = requests or max(1, int(np.ceil(est.decode_requests_per_worker - 1e-9)))
    ctx = isl_m + osl_m / 2.0
    p = parts(worker, N, ctx)
    lines = [f"== {row_id}",
             f"   {row['system']} {row['backend']} {row['backend_version']} "
             f"{row['gemm_quant_mode']}/{row['moe_quant_mode']}  ISL {isl} OSL {osl} C {conc}"
             f"  decode {disagg.decode.label()}  prefill {disagg.prefill.label()}",
             f"   measured TPOT {float(row['silicon_tpot_ms']):.2f} ms, predicted "
             f"{est.tpot_ms:.2f} ms; step of N = {N} requests per worker at context {ctx:.0f}"]
    for k, n, cnt, dtype, meas, roof in p["gemms"]:
        lines.append(f"   GEMM k={k:>7g} n={n:>7g} x{cnt:<3g} {dtype:<10} measured "
                     f"{meas:8.3f}  roofline {roof:8.3f} ms")
    if p["moe"]:
        key, dtype, dist, meas, roof, ok = p["moe"]
        lines.append(f"   MoE  key {key} {dtype} {dist}: measured {meas:.3f} (priced {ok}), "
                     f"roofline {roof:.3f} ms; shared experts hidden "
                     f"{p.get('shared_hidden_ms', 0.0):.3f} ms")
    r = p["roofline"]
    lines.append("   roofline components: " + ", ".join(
        f"{k} {r[k]:.3f}" for k in ("layers_non_attention", "attention", "lm_head",
                                    "communication", "overhead")))
    lines.append(f"   TP-{dec.gpus_per_worker} pass: physics {p['tp_g_physics_ms']:.3f} (attention "
                 f"{p['tp_g_attention_ms']:.3f}) + overhead {p['tp_g_overhead_ms']:.3f} = "
                 f"{p['tp_g_step_ms']:.3f} ms")
    for k, v in (p.get("dp") or {}).items():
        lines.append(f"   dp  {k:<26} {v:9.3f}")
    if "dp_overhead_ms" in p:
        lines.append(f"   dp  overhead, host CPU over n {p['dp_overhead_ms']:9.3f} (in place of "
                     f"the TP-{dec.gpus_per_worker} pass's {p['tp_g_overhead_ms']:.3f})")
    lines.append(f"   step {p['step_ms']:.3f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="silicon_sample.csv disaggregated row ids")
    ap.add_argument("--requests", type=int, default=None,
                    help="requests per decode worker (default the steady-state occupancy)")
    args = ap.parse_args(argv)
    for r in args.rows:
        print(report(r, args.requests))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
