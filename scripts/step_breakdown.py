"""One silicon_sample.csv row's decode step, split by component, beside AIConfigurator's own price.

    python scripts/step_breakdown.py ROW_ID [ROW_ID ...] [--context N]

For each row (its id in aiconfigurator-core's systems/silicon_sample.csv; the deployment as
`silicon-validate` maps it: GPU, model, engine, tp, ep, weight formats) and one decode step of
C = the row's concurrency sequences at `--context` cached tokens each (default ISL + OSL / 2, the
middle of a request's decode), it prints:

- the project's step as the cost model prices it (the silicon scenario's cost model, measured
  kernels where the engine has tables): every dense GEMM (k, n, count, dtype, measured ms from
  the table or the roofline's), the routed experts (the MoE table's key, lane, moe_tp / moe_ep,
  dtype, distribution, measured ms vs the roofline's), attention, communication, and the
  engine's host overhead (step CPU not hidden behind the GPU);
- AIConfigurator's own estimate of the same step: its model's generation ops for the same
  system, backend version, tp, moe_tp / moe_ep and quant modes, each leaf op evaluated from
  its database (`Operation._engine_query`, the SDK's single-op path) at the same batch and KV
  length, and its whole decode step (`EngineHandle.decode_step_latency`).

A diagnostic, nothing is fitted: design.md ("Silicon validation: the two largest p90 groups")
records what it found.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# the CSV's gemm/moe_quant_mode names <- the project's weight formats (the inverse of
# silicon_rows.QUANT_FORMAT for the formats these rows carry)
AIC_QUANT = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "nvfp4",
             "mxfp4": "w4a16_mxfp4"}


def _case(row_id: str):
    from src.costmodel import load_engine_profiles
    from src.costmodel.presets import load_presets
    from src.validation.silicon_rows import load_rows, map_row
    rows = load_rows()
    hit = rows[rows.id == row_id]
    if hit.empty:
        raise SystemExit(f"no row {row_id} in silicon_sample.csv")
    row = hit.iloc[0]
    case = map_row(row, set(load_engine_profiles()), load_presets())
    if isinstance(case, str):
        raise SystemExit(f"{row_id}: {case}")
    return case, row


def project_parts(case, context: int) -> dict:
    """The project's decode step of case.concurrency sequences at `context` tokens, by part."""
    from src.costmodel.roofline import forward_pass_breakdown
    from src.kernels.grid import along_axis
    from src.validation import host_fit
    from src.validation.silicon_serve import serve_config
    fits = host_fit.read_fits()
    cfg = serve_config(case, fits.get(case.engine))
    cost = cfg.scenario.cost_model()
    S = case.concurrency
    out: dict = {"gemms": [], "moe": None}
    g = cost.kernels
    T = np.array([float(S)])
    if g is not None and g.shapes:
        roof = g._roofline_ms(T)[:, 0]
        for i, ((k, n), dtype, cnt) in enumerate(zip(g.shapes, g.dtypes, g.counts)):
            col, m_axis = g.columns[i], g.m_axes[i]
            meas = float(cnt * along_axis(m_axis, col, T)[0]) if col is not None else np.nan
            out["gemms"].append({"k": k, "n": n, "count": cnt, "dtype": dtype or "(roofline)",
                                 "measured_ms": meas, "roofline_ms": float(roof[i])})
    moe = g.moe if g is not None else None
    if moe is not None:
        d, meas, ok = moe.parts_ms(np.array([float(S)]), np.array([1.0]))
        out["moe"] = {"key (h, I, k, E, moe_tp, moe_ep)": moe.key, "dtype": moe.dtype,
                      "lane": moe.kernel_source, "distribution": moe.distribution,
                      "layers": moe.moe_layers, "measured_ms": float(meas[0]),
                      "roofline_ms": float(meas[0] - d[0]), "priced": bool(ok[0]),
                      "shared experts hidden (second stream) ms":
                      float(g.shared_hidden_ms(np.array([float(S)]), np.array([1.0]))[0])}
    r = forward_pass_breakdown(cost.gpu, cost.target, cost.tp, S, 1, context, cost.params,
                               cost.allreduce, engine=cost.engine,
                               attention_fits=cost.attention_fits, ep=cost.ep)
    physics, overhead = cost.target_pass_parts(np.ones((1, S), bool), 1,
                                               np.full((1, S), context))
    out.update(roofline_attention_ms=r.attention_ms, communication_ms=r.communication_ms,
               roofline_total_ms=r.total_ms, physics_ms=float(physics[0]),
               host_overhead_ms=float(overhead[0]),
               step_ms=float(physics[0] + overhead[0]), engine=cost.engine.name,
               attention_measured=cost.attention_kernels is not None,
               kernels=None if g is None else g.label)
    return out


def aic_parts(case, row, context: int) -> dict:
    """AIConfigurator's price of the same decode step, per leaf op and in total."""
    from aiconfigurator_core.sdk.engine import (
        EngineHandle,
        _evaluate_single_op,
        build_model_config,
    )
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database

    from src.kernels.sources import table_source
    src, why = table_source(case.gpu, case.engine)
    if src is None:
        return {"why": why}
    tp, ep = case.tp, case.ep
    moe_tp = tp // ep
    gq = AIC_QUANT.get(case.weight_format)
    mq = AIC_QUANT.get(case.expert_weight_format) if case.expert_weight_format else None
    kw = dict(tp_size=tp, pp_size=1, attention_dp_size=1, moe_tp_size=moe_tp, moe_ep_size=ep,
              gemm_quant_mode=gq, moe_quant_mode=mq, kvcache_quant_mode=None,
              fmha_quant_mode=None, comm_quant_mode=None, forward_model=None,
              attention_backend=None)
    mc = build_model_config(**kw)
    model = get_model(case.model, mc, src.backend)
    db = get_database(src.system, src.backend, src.version)
    S = case.concurrency
    leaves = []

    def walk(op, group=""):
        kids = []
        for a in ("_primary", "_fallback", "_group_a", "_group_b"):
            try:
                v = getattr(op, a, None)
            except Exception:
                v = None
            if v is not None:
                kids += [(a, s) for s in (v if isinstance(v, (list, tuple)) else [v])]
        if kids:
            for a, s in kids:
                if a != "_primary":  # the fallback's leaves are the priced split
                    walk(s, f"{op._name}/{a}")
            return
        shape = type(op)._ENGINE_QUERY_SHAPE
        args = ({"batch_size": S, "s": 1, "x": S} if shape != "generation"
                else {"batch_size": S, "s": context + 1})
        try:
            ms = float(_evaluate_single_op(db, op, is_context=False, **args))
        except Exception as e:  # an op the single-op path cannot evaluate alone
            ms = float("nan")
            group += f" ({type(e).__name__})"
        leaves.append((group, op._name, ms))

    for op in model.generation_ops:
        walk(op)
    handle = EngineHandle.compile(case.model, src.system, src.backend, backend_version=src.version,
                                  tp_size=tp, moe_tp_size=moe_tp, moe_ep_size=ep,
                                  gemm_quant_mode=gq, moe_quant_mode=mq)
    _, gen = handle.run_static_per_op(batch_size=S, isl=context, osl=2, mode="static_gen")
    return {"version": f"{src.backend} {src.version}", "leaves": leaves,
            "per_op": [(n, float(v)) for n, v, *_ in gen],
            "step_ms": float(sum(v for _, v, *_ in gen))}


def report(row_id: str, context: int | None) -> str:
    case, row = _case(row_id)
    ctx = context if context is not None else case.isl + case.osl // 2
    p = project_parts(case, ctx)
    lines = [f"== {row_id}",
             f"   {case.system} {case.backend} {row['backend_version']}  {case.model}  tp {case.tp}"
             f" ep {case.ep}  {case.weight_format}/{case.expert_weight_format}"
             f"  C {case.concurrency}  ISL {case.isl} OSL {case.osl}"
             f"  measured TPOT {case.measured_tpot_ms:.2f} ms",
             f"-- project ({p['engine']}, kernels {p['kernels']}), decode step of "
             f"{case.concurrency} x 1 at context {ctx}:"]
    for gm in p["gemms"]:
        lines.append(f"   GEMM k={gm['k']:>7g} n={gm['n']:>7g} x{gm['count']:<3g} "
                     f"{gm['dtype']:<10} measured {gm['measured_ms']:7.3f}  roofline "
                     f"{gm['roofline_ms']:7.3f} ms")
    if p["moe"]:
        lines.append("   MoE  " + ", ".join(f"{k} {v}" for k, v in p["moe"].items()))
    lines += [f"   attention (roofline) {p['roofline_attention_ms']:.3f} ms"
              f"{' (measured table applies)' if p['attention_measured'] else ''}; "
              f"communication {p['communication_ms']:.3f} ms",
              f"   physics {p['physics_ms']:.3f} + host overhead {p['host_overhead_ms']:.3f} = "
              f"step {p['step_ms']:.3f} ms  (roofline alone {p['roofline_total_ms']:.3f})"]
    a = aic_parts(case, row, ctx)
    if "why" in a:
        lines.append(f"-- AIConfigurator: {a['why']}")
        return "\n".join(lines)
    lines.append(f"-- AIConfigurator ({a['version']}), same step:")
    for group, name, ms in a["leaves"]:
        lines.append(f"   {group:<40} {name:<36} {ms:8.3f} ms")
    lines.append("   per op (run_static_per_op): " + ", ".join(f"{n} {v:.3f}"
                                                              for n, v in a["per_op"]))
    lines.append(f"   step {a['step_ms']:.3f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="silicon_sample.csv row ids")
    ap.add_argument("--context", type=int, default=None,
                    help="cached tokens per sequence (default ISL + OSL / 2)")
    args = ap.parse_args(argv)
    for r in args.rows:
        print(report(r, args.context))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
