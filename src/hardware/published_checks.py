"""The hardware model against published measurements: MagicDec Table 1, the vLLM blog (2024) and
vLLM V1's EAGLE-3 timings (2025).

    python -m src.hardware.published_checks      # print the predicted-vs-measured tables (markdown)

Sources (scenario files configs/scenarios/check-*.toml give the setups and assumptions):

* MagicDec Table 1: Chen et al. 2024, "MagicDec: Breaking the Latency-Throughput Tradeoff for Long
  Context Generation with Speculative Decoding" (arXiv 2408.11049). Llama-2-7B-32K on 4x H100,
  context 8000, batch 64, gamma 4, self-speculation with a StreamingLLM draft KV cache:
  gamma x T_D = 23.63 ms, T_V = 27.90 ms, T_AR = 26.17 ms, Omega = 3.37, speedup 1.68x.
* vLLM blog, "How Speculative Decoding Boosts vLLM Performance by up to 2.8x" (2024-10-17):
  Llama-3-70B on 4x H100; draft model Qwama-0.5B on ShareGPT 1.5x faster at QPS 1, 1.4x slower
  at high QPS; n-gram on CNN/DailyMail 2.8x faster at QPS 1, 1.8x slower at high QPS.
* vLLM issue #20780 (github.com/vllm-project/vllm/issues/20780, 2025-07): vLLM V1 on one H100,
  Llama-3.1-8B-Instruct, batch 1, MT-Bench: time per output token 7.07 ms without speculation and
  with EAGLE-3 at K = 2..7 drafts, with the measured acceptance length (tokens per step). Measured
  before asynchronous scheduling covered EAGLE steps (vLLM PR #24799, 2025-10), so it checks the
  vllm-v1 profile with its CPU not overlapped; nothing was fitted to it.

tests/test_published_checks.py asserts the tolerances; design.md's table is generated from here
(scripts/update_docs.py), so the two cannot drift apart.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from src.costmodel import HardwareCostModel, engine_profile
from src.hardware.scenario import SCENARIOS_DIR, load_scenario
from src.kernels.costmodel import AUTO, with_kernels
from src.sweep import run_grid

MAGICDEC = {"gamma_T_D_ms": 23.63, "T_V_ms": 27.90, "T_AR_ms": 26.17, "omega": 3.37,
            "speedup": 1.68}
VLLM_BLOG = {  # scenario file -> (low-load speedup, high-load speedup)
    "check-vllm-blog-70b-draft.toml": (1.5, 1 / 1.4),
    "check-vllm-blog-70b-ngram.toml": (2.8, 1 / 1.8),
}
LOW_LOAD = (1, 2, 4)
HIGH_LOAD = (64, 128, 256)
VLLM_V1_VANILLA_TPOT_MS = 7.07
VLLM_V1_EAGLE3 = {  # K drafts -> (time per output token ms, acceptance length tokens per step)
    2: (4.32, 2.36), 3: (4.09, 2.79), 4: (4.05, 3.08), 5: (4.13, 3.32), 6: (4.20, 3.46),
    7: (4.29, 3.54),
}
VLLM_V1_CONTEXT_TOKENS = 400  # assumption: MT-Bench prompts plus part of a 256-token answer


def vllm_v1_eagle3() -> dict:
    """Predicted time per output token, ms: "vanilla" and K -> EAGLE-3 with K drafts (the measured
    acceptance length as tokens per step), under vllm-v1 without CPU overlap (as measured) and,
    for contrast, with it ("async")."""
    base = engine_profile("vllm-v1")
    sync = replace(base, cpu_overlap_decode=False, cpu_overlap_draft_kinds=())
    out = {}
    for label, engine in (("sync", sync), ("async", base)):
        # priced as a scenario prices (with_kernels: measured GEMMs where the tables exist)
        cost = with_kernels(HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b",
                                                           draft="eagle", engine=engine), AUTO)
        ctx = VLLM_V1_CONTEXT_TOKENS
        tpot = {"vanilla": cost.step_breakdown(1, 2, ctx).decode_ms}
        for k, (_, tokens_per_step) in VLLM_V1_EAGLE3.items():
            s = cost.step_breakdown(1, k, ctx)
            tpot[k] = (s.draft_ms + s.verify_ms) / tokens_per_step
        out[label] = tpot
    return out


def magicdec() -> dict:
    """engine -> (StepBreakdown at batch 64, gamma 4, context 8000; the simulated grid row)."""
    scenario = load_scenario(SCENARIOS_DIR / "check-magicdec-table1.toml")
    out = {}
    for engine in scenario.engine_profiles:
        cost = scenario.cost_model(engine)
        out[engine] = (cost.step_breakdown(batch=64, gamma=4, context_len_tokens=8000),
                       run_grid(scenario.study, cost).iloc[0])
    return out


def magicdec_predicted(result: dict, engine: str = "ideal") -> dict:
    bd, row = result[engine]
    return {"gamma_T_D_ms": bd.draft_ms, "T_V_ms": bd.verify_ms, "T_AR_ms": bd.decode_ms,
            "omega": row.tokens_per_step, "speedup": bd.speedup(MAGICDEC["omega"]),
            "simulated_speedup": row.speedup}


def vllm_blog() -> dict:
    """(scenario file, engine) -> {batch size: simulated speedup}."""
    out = {}
    for name in VLLM_BLOG:
        scenario = load_scenario(SCENARIOS_DIR / name)
        for engine in ("vllm-2024", "ideal"):
            df = run_grid(scenario.study, scenario.cost_model(engine))
            out[(name, engine)] = dict(zip(df.batch_size, df.speedup))
    return out


def markdown(magicdec_result: dict, vllm_result: dict, v1_result: dict | None = None) -> str:
    p = magicdec_predicted(magicdec_result)
    labels = {"gamma_T_D_ms": "gamma x T_D, ms", "T_V_ms": "T_V, ms", "T_AR_ms": "T_AR, ms",
              "omega": "Omega (simulated tokens per step)",
              "speedup": "speedup Omega T_AR / (gamma T_D + T_V), Omega = 3.37"}
    lines = ["MagicDec Table 1, `ideal` engine:", "", "| quantity | measured | predicted | error |",
             "|---|---|---|---|"]
    for key, label in labels.items():
        lines.append(f"| {label} | {MAGICDEC[key]:.2f} | {p[key]:.2f} | "
                     f"{100 * (p[key] / MAGICDEC[key] - 1):+.1f}% |")
    lines.append(f"| speedup, simulated (run_grid, continuous refill) | {MAGICDEC['speedup']:.2f} "
                 f"| {p['simulated_speedup']:.2f} | "
                 f"{100 * (p['simulated_speedup'] / MAGICDEC['speedup'] - 1):+.1f}% |")
    q = magicdec_predicted(magicdec_result, "vllm-2024")
    lines += ["", "The same setup under `vllm-2024` (not what MagicDec ran; for contrast): gamma x "
                  "T_D "
              f"{q['gamma_T_D_ms']:.2f} ms, T_V {q['T_V_ms']:.2f} ms, T_AR {q['T_AR_ms']:.2f} ms, "
              f"simulated speedup {q['simulated_speedup']:.2f}x.", "",
              "vLLM blog (Llama-3-70B, 4x H100, gamma 5), speedup measured vs predicted:", "",
              "| check | engine | measured low | predicted B=1/2/4 | measured high | predicted "
              "B=64/128/256 |",
              "|---|---|---|---|---|---|"]
    for (name, engine), sp in vllm_result.items():
        low, high = VLLM_BLOG[name]
        check = name.removeprefix("check-vllm-blog-70b-").removesuffix(".toml")
        lines.append(f"| {check} | {engine} | {low:.2f} | "
                     f"{' / '.join(f'{sp[b]:.2f}' for b in LOW_LOAD)} | "
                     f"{high:.3f} | {' / '.join(f'{sp[b]:.2f}' for b in HIGH_LOAD)} |")
    if v1_result is not None:
        sync, fast = v1_result["sync"], v1_result["async"]
        title = ("vLLM V1, H100, Llama-3.1-8B, batch 1, EAGLE-3 (vLLM issue #20780), time per "
                 "output token in ms: measured vs `vllm-v1` with the CPU not overlapped (as "
                 "measured) and with asynchronous scheduling (today's default):")
        lines += ["", title, "",
                  "| drafts K | measured | predicted | error | predicted, async |",
                  "|---|---|---|---|---|",
                  (f"| none | {VLLM_V1_VANILLA_TPOT_MS:.2f} | {sync['vanilla']:.2f} | "
                   f"{100 * (sync['vanilla'] / VLLM_V1_VANILLA_TPOT_MS - 1):+.1f}% | "
                   f"{fast['vanilla']:.2f} |")]
        for k, (tpot, _) in VLLM_V1_EAGLE3.items():
            lines.append(f"| {k} | {tpot:.2f} | {sync[k]:.2f} | {100 * (sync[k] / tpot - 1):+.1f}% "
                         f"| {fast[k]:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(magicdec(), vllm_blog(), vllm_v1_eagle3()))
    sys.exit(0)
