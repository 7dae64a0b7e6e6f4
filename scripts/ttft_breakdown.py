"""One silicon_sample.csv row's time to first token, split: the project's prefill pass, the
measured kernels' price of the same pass, AIConfigurator's context-phase estimate, the simulated
run's burst and steady TTFT, and the measured mean.

    python scripts/ttft_breakdown.py ROW_ID [ROW_ID ...]

For each row (the deployment as `silicon-validate` maps it) and one prompt of the benchmark's
mean length L (bench_run.mean_length of the row's ISL for an InferenceX row, else ISL):

- the project's prefill pass of 1 x L at an empty cache (HardwareCostModel.prefill_parts, the
  roofline: what the serving loop prices a prompt chunk with), by component, and the serving
  timer's price of the same prompt (StepTimer.prefill_ms) and of it beside C - 1 decoding
  sequences at ISL + OSL / 2 cached tokens;
- what the measured GEMM / MoE tables add to a pass of L rows (PassGemms.pass_delta_ms, the
  delta the decode steps take and the prefill chunks do not), with the MoE layer's lane;
- AIConfigurator's context phase of batch 1 x L (EngineHandle.run_static_per_op, mode
  static_ctx) for the row's system, backend version, tp, moe_tp / moe_ep and quant modes (an
  MLA model without FP8 context-MLA rows is retried with BF16 FMHA);
- the simulated benchmark run (silicon_serve's config): mean TTFT of the opening burst (the first
  C requests) and of the rest, and the run's mean, beside the measured mean TTFT and TPOT.

A diagnostic, nothing is fitted (design.md, "Where a lone prompt's TTFT goes").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

# bundled config.json ids of the CSV's model names the SDK does not resolve offline
AIC_MODEL = {"meta-llama/Llama-3.1-70B": "meta-llama/Meta-Llama-3.1-70B"}


def aic_context_ms(case, L: int):
    """(total ms, [(op, ms)], label) of AIConfigurator's context phase of 1 x L, or a reason."""
    from aiconfigurator_core.sdk.engine import EngineHandle
    from step_breakdown import AIC_QUANT

    from src.kernels.sources import table_source
    src, why = table_source(case.gpu, case.engine)
    if src is None:
        return why
    gq = AIC_QUANT.get(case.weight_format)
    mq = AIC_QUANT.get(case.expert_weight_format) if case.expert_weight_format else None
    last = ""
    for fmha in (None, "bfloat16"):
        try:
            h = EngineHandle.compile(AIC_MODEL.get(case.model, case.model), src.system,
                                     src.backend, backend_version=src.version, tp_size=case.tp,
                                     moe_tp_size=case.tp // case.ep, moe_ep_size=case.ep,
                                     gemm_quant_mode=gq, moe_quant_mode=mq, fmha_quant_mode=fmha)
            ctx, _ = h.run_static_per_op(batch_size=1, isl=L, osl=2, mode="static_ctx")
        except Exception as e:  # the SDK's PerfDataNotAvailableError and kin
            last = f"{type(e).__name__}: {str(e)[:160]}"
            continue
        ops = [(n, float(v)) for n, v, *_ in ctx]
        return sum(v for _, v in ops), ops, f"{src.backend} {src.version} fmha {fmha or 'auto'}"
    return last


def report(row_id: str) -> str:
    from step_breakdown import _case

    from src.costmodel.roofline import pass_components_s
    from src.online.steptime import StepTimer
    from src.online.study import prepare, simulate_rate
    from src.validation import host_fit
    from src.validation.bench_run import mean_length
    from src.validation.silicon_serve import serve_config
    case, _ = _case(row_id)
    L = mean_length(case.isl) if case.range_ratio < 1 else case.isl
    cfg = serve_config(case, host_fit.read_fits().get(case.engine))
    cost = cfg.scenario.cost_model()
    C = case.concurrency
    lines = [f"== {row_id}", f"   {case.system} {case.engine} tp {case.tp} ep {case.ep} "
             f"{case.weight_format}/{case.expert_weight_format} C {C} prompt {L} tokens"]
    physics, overhead = cost.prefill_parts(1, L)
    comp = pass_components_s(cost._target_c, np.array(1), np.array(L), np.array(0), prefill=True)
    parts = ", ".join(f"{k} {float(comp[k]) * 1e3:.1f}" for k in
                      ("layers_non_attention", "attention", "lm_head", "communication"))
    timer = StepTimer(cost, False)
    n, ctx = C - 1, case.isl + case.osl // 2
    dec, _ = timer.decode_ms_totals(np.array([n]), np.array([n * ctx]), np.array([0]), 1024)
    extra = timer.prefill_extra_ms(np.array([n]), np.array([0]), np.array([n * ctx]),
                                   np.array([1]), np.array([L]), np.array([0.0]), np.array([1]))
    lines += [f"   project prefill (roofline) {float(physics):.1f} + host {float(overhead):.2f}"
              f" ms ({parts})",
              f"   serving timer: prompt alone {timer.prefill_ms(1, L):.1f} ms; beside {n} "
              f"decodes {float(dec[0]):.1f} + {float(extra[0]):.1f} = "
              f"{float(dec[0] + extra[0]):.1f} ms"]
    g = cost.kernels
    if g is not None:
        delta = float(g.pass_delta_ms(np.array([1.0]), np.array([float(L)]))[0])
        moe = ""
        if g.moe is not None:
            d, meas, ok = g.moe.parts_ms(np.array([1.0]), np.array([float(L)]))
            moe = (f"; MoE layer {g.moe.kernel_source} {g.moe.dtype}: measured "
                   f"{float(meas[0]):.1f} vs roofline {float(meas[0] - d[0]):.1f} ms"
                   f"{'' if ok[0] else ' (not priced)'}")
        lines.append(f"   measured tables add {delta:+.1f} ms to a pass of {L} rows{moe}")
    else:
        lines.append("   measured tables: none for this target's GEMMs (roofline)")
    a = aic_context_ms(case, L)
    if isinstance(a, str):
        lines.append(f"   AIConfigurator: {a}")
    else:
        total, ops, label = a
        lines.append(f"   AIConfigurator ({label}) context {total:.1f} ms: "
                     + ", ".join(f"{k.removeprefix('context_')} {v:.1f}" for k, v in ops if v))
    prepared = prepare(cfg)
    result, groups, _ = simulate_rate(cfg, prepared, float(C))
    rows = next(grp.rows for grp in groups if grp.policy.name == "none")
    burst, steady = [], []
    for r in rows:
        t = (result.first_token_s[r] - result.arrival_s[r]) * 1e3
        t = t[np.isfinite(t)]
        burst.append(t[:C].mean())
        steady.append(t[C:].mean() if t.size > C else np.nan)
    b, s = float(np.mean(burst)), float(np.nanmean(steady))
    w = case.prompts_per_client
    lines.append(f"   simulated TTFT: burst {b:.1f}, steady {s:.1f}, run mean "
                 f"{(b + (w - 1) * s) / w:.1f} ms; measured mean TTFT "
                 f"{case.measured_ttft_ms:.1f} ms, TPOT {case.measured_tpot_ms:.2f} ms")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+", help="silicon_sample.csv row ids")
    args = ap.parse_args(argv)
    for r in args.rows:
        print(report(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
