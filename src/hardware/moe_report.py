"""The MoE section of summary.txt (`python run.py moe-study`): per MoE scenario, the verification
premium by batch size against a dense twin, the best gamma and its speedup, where speculation pays
most and where it turns slower than greedy, and the vLLM / SGLang settings by the project's rules.

Engine settings (the names each engine's own parser accepts):
  vLLM (vllm/config/speculative.py, SpeculativeConfig): method "eagle3" or "eagle" with the head's
    repository as "model"; method "mtp" without a model (the target's own MTP layers are loaded;
    "deepseek_mtp" is a deprecated alias). num_speculative_tokens = the schedule's largest gamma,
    num_speculative_tokens_per_batch_size = a gamma per batch range (0 = off) by the schedule rule
    of src/gamma_rule.py (every grid batch within its tolerance of the best modelled speedup, the
    fewest ranges: `recommend`'s rule; the literal per-batch best zig-zags on a flat objective),
    written as ranges as src/hardware/schedules.py writes them for the dense scenarios.
  SGLang (python/sglang/srt/server_args.py, speculative/spec_info.py): --speculative-algorithm
    EAGLE3 for an EAGLE-3 head, EAGLE for an EAGLE(-2) head and for DeepSeek's MTP layers (NEXTN is
    rewritten to EAGLE, and for DeepseekV3ForCausalLM the draft path defaults to the model path, so
    none is printed); a chain: --speculative-eagle-topk 1, num-steps gamma, num-draft-tokens
    gamma + 1. SGLang has one draft length for every batch: the best gamma at batch 1, the rule
    `recommend` uses.
  Where an engine would misload a scenario's head, its settings are replaced by one line saying
  why, and a caveat goes under the other's (moe_cli.ENGINE_NOTES, sourced there).
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from src.gamma_rule import MAX_RANGES, SCHEDULE_TOLERANCE, capped_gammas
from src.hardware.schedules import schedule_ranges
from src.treeshape.shape import TreeShape

SECTION_BEGIN = "=== MIXTURE-OF-EXPERTS TARGETS (python run.py moe-study) ==="
SECTION_END = "=== END MIXTURE-OF-EXPERTS TARGETS ==="
PREMIUM_GAMMA = 3  # the premium is reported for a 4-token verification (the example)
VLLM_METHOD = {"eagle3": "eagle3", "eagle": "eagle", "mtp": "mtp", "model": "draft_model"}
SGLANG_ALGORITHM = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "EAGLE", "model": "STANDALONE"}


def draft_kind(draft: str, models) -> str:
    """The scenario's draft as a kind: eagle3 (also an EAGLE-3 head preset), eagle, mtp, model."""
    if draft not in models:  # eagle, eagle3, mtp, ngram, self
        return draft
    return "eagle3" if models[draft].architecture == "eagle3" else "model"


def schedule_gammas(rows: pd.DataFrame) -> tuple[list[int], list[int], float]:
    """(grid batch sizes, gamma per batch size, tolerance used) by src/gamma_rule.py's rule over
    the grid: rows hold one target's speedup per (batch_size, gamma) of one quality mode; gamma 0
    (no speculation) counts with speedup 1."""
    table = rows.pivot_table(index="gamma", columns="batch_size", values="speedup")
    batches = [int(b) for b in table.columns]
    top = int(table.index.max())
    by_gamma = np.ones((top + 1, len(batches) + 1))  # gammas absent from the grid: never chosen
    by_gamma[1:, 1:] = 0.0
    for g in table.index:
        by_gamma[int(g), 1:] = table.loc[g].to_numpy(float)
    gammas, used = capped_gammas(by_gamma)
    return batches, [int(g) for g in gammas[1:]], used


def vllm_config(kind: str, head_path: str | None, batches: list[int],
                gammas: list[int]) -> dict | None:
    """The --speculative-config object from a gamma per grid batch size (None: never faster)."""
    if max(gammas) <= 0:
        return None
    out: dict = {"method": VLLM_METHOD[kind]}
    if kind != "mtp":
        out["model"] = head_path
    out["num_speculative_tokens"] = int(max(gammas))
    out["num_speculative_tokens_per_batch_size"] = schedule_ranges(batches, gammas, batches[-1])
    return out


def sglang_draft_flags(kind: str, head_path: str | None) -> str:
    """SGLang's algorithm and draft flags of an EAGLE-family draft (MTP: no draft path)."""
    flags = [f"--speculative-algorithm {SGLANG_ALGORITHM[kind]}"]
    if kind != "mtp":
        flags.append(f"--speculative-draft-model-path {head_path}")
    return " ".join(flags)


def sglang_flags(kind: str, head_path: str | None, gamma: int) -> str:
    return f"{sglang_draft_flags(kind, head_path)} {TreeShape.chain(gamma).sglang_flags}"


def _x(speedup: float) -> str:
    """A speedup to 2 decimals, 4 where 2 would round it onto 1.00 (the side of 1 matters)."""
    return f"{speedup:.4f}" if abs(speedup - 1.0) < 0.005 else f"{speedup:.2f}"


def _slower(best: pd.DataFrame) -> str:
    """'never slower than greedy', or the batch sizes where even the best gamma is."""
    slow = best[best.speedup < 1.0].batch_size.astype(int).tolist()
    return (f"slower than greedy at B={', '.join(map(str, slow))}" if slow
            else "never slower than greedy")


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def scenario_block(study, models, head_path: str | None, target_path: str | None = None,
                   engine_notes: dict[str, str] | None = None) -> list[str]:
    """The scenario's lines. engine_notes: "sglang" = why no SGLang flags are printed (an engine
    would misload the head), "vllm" = a caveat under the vLLM settings."""
    engine_notes = engine_notes or {}
    sc = study.scenario
    mode = sc.study.quality_modes[0]
    rows = study.rows[study.rows.quality_mode == mode]
    best = study.best[study.best.quality_mode == mode]
    g_ref = PREMIUM_GAMMA if PREMIUM_GAMMA in set(rows.gamma) else int(rows.gamma.min())
    moe_b = best[best.target == "moe"].set_index("batch_size")
    twin_b = best[best.target == "dense twin"].set_index("batch_size")
    ref = rows[rows.gamma == g_ref].set_index(["target", "batch_size"])
    lines = [f"--- {sc.name}: {sc.description}",
             f"Engine profile {study.engine}; steady state with every sequence at "
             f"{study.context_tokens} tokens of context; quality mode {mode} "
             f"({sc.acceptance_source}).",
             f"Kernels: {study.kernels_label}.",
             f"Premium = verification pass of gamma {g_ref} ({g_ref + 1} tokens per sequence) / "
             "decode pass; experts = fraction of the routed experts one MoE layer reads."]
    header = ["batch", "experts decode", f"experts verify g{g_ref}", "premium MoE",
              "premium dense twin", "best gamma", "speedup", "dense twin: gamma, speedup"]
    table = []
    for b in moe_b.index:
        m, t = moe_b.loc[b], twin_b.loc[b]
        table.append([str(b), _fmt_pct(ref.loc[("moe", b), "experts_decode_fraction"]),
                      _fmt_pct(ref.loc[("moe", b), "experts_verify_fraction"]),
                      f"{ref.loc[('moe', b), 'premium']:.2f}",
                      f"{ref.loc[('dense twin', b), 'premium']:.2f}",
                      str(int(m.gamma)), _x(m.speedup),
                      f"{int(t.gamma)}, {_x(t.speedup)}"])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    lines += ["   " + "  ".join(str(x).rjust(w) for x, w in zip(r, widths))
              for r in [header] + table]
    top = moe_b.speedup.idxmax()
    lines.append(f"Speculation pays most at batch {top}: {moe_b.speedup[top]:.2f}x at gamma "
                 f"{int(moe_b.gamma[top])} (batch {moe_b.index[0]}: "
                 f"{moe_b.speedup.iloc[0]:.2f}x); the dense twin peaks at batch "
                 f"{twin_b.speedup.idxmax()} ({twin_b.speedup.max():.2f}x).")
    lines.append(f"Where it is slower than greedy (best gamma < 1x), batches 1-{moe_b.index[-1]}: "
                 f"MoE target {_slower(moe_b.reset_index())}; dense twin "
                 f"{_slower(twin_b.reset_index())}.")
    for engine, sub in study.other_engines[study.other_engines.quality_mode == mode].groupby(
            "engine_profile", sort=False):
        sub = sub.sort_values("batch_size")
        at = ", ".join(f"B={b} {_x(x)} (g{g})" for b, x, g in zip(sub.batch_size, sub.speedup,
                                                                  sub.gamma))
        lines.append(f"Engine profile {engine}, best gamma: {at}; {_slower(sub)}.")
    others = [m for m in sc.study.quality_modes if m != mode]
    for m in others:
        sub = study.best[(study.best.quality_mode == m) & (study.best.target == "moe")]
        top = sub.loc[sub.speedup.idxmax()]
        lines.append(f"Quality mode {m} ({study.engine}): {sub.speedup.iloc[0]:.2f}x at batch "
                     f"{int(sub.batch_size.iloc[0])}, most {top.speedup:.2f}x at batch "
                     f"{int(top.batch_size)} (gamma {int(top.gamma)}).")
    kind = draft_kind(sc.draft, models)
    model = target_path or models[sc.target_model_id].hf_name
    batches, gammas, used = schedule_gammas(rows[rows.target == "moe"])
    cfg = vllm_config(kind, head_path, batches, gammas)
    tp_vllm = f" --tensor-parallel-size {sc.tp}" if sc.tp > 1 else ""
    if cfg is None:
        lines.append("vLLM: speculation is slower than greedy at every batch size: leave "
                     "--speculative-config unset.")
    else:
        lines.append(f"vLLM: vllm serve {model}{tp_vllm} --speculative-config "
                     f"'{json.dumps(cfg)}'")
        if used > SCHEDULE_TOLERANCE:
            lines.append(f"  (the list's tolerance widened to {used:.0%} to keep it at "
                         f"most {MAX_RANGES} ranges: src/gamma_rule.py.)")
        if "vllm" in engine_notes:
            lines.append(f"  (vLLM: {engine_notes['vllm']}.)")
    g1 = int(moe_b.schedule_gamma.iloc[0])
    if "sglang" in engine_notes:
        lines.append(f"SGLang: {engine_notes['sglang']}.")
    elif g1 > 0:
        tp_sgl = f" --tp {sc.tp}" if sc.tp > 1 else ""
        lines.append(f"SGLang (one gamma for every batch: {g1}, the best at batch "
                     f"{moe_b.index[0]}): python -m sglang.launch_server --model-path {model}"
                     f"{tp_sgl} {sglang_flags(kind, head_path, g1)}")
    else:
        lines.append("SGLang: speculation does not pay at batch 1: no speculative flags.")
    return lines


def summary_section(studies, models, head_paths: dict[str, str | None],
                    target_paths: dict[str, str], validation_lines: list[str],
                    engine_notes: dict[str, dict[str, str]] | None = None) -> str:
    """The whole section, between SECTION_BEGIN and SECTION_END."""
    lines = [SECTION_BEGIN,
             "Mixture-of-Experts targets, closed-form steady state (src/hardware/moe_study.py), "
             "each against its dense twin: the same model with only its k routed experts (E = k: "
             "the same active parameters, formats, kernels, attention and draft; every pass "
             "reads the same k experts). Passes are priced from the engine's measured kernel "
             "tables (aiconfigurator-core: GEMMs, decode attention, fused MoE layers) where they "
             "hold the pass's shapes and from the refitted roofline elsewhere (each scenario's "
             "Kernels line; `python run.py step-time` names each component's source). "
             f"The vLLM per-batch lists switch gamma only where the gain exceeds "
             f"{SCHEDULE_TOLERANCE:.0%} (src/gamma_rule.py). Acceptance is an i.i.d. "
             "rate inverted from one published accept length: deep gammas are extrapolated.", ""]
    for study in studies:
        name = study.scenario.name
        lines += scenario_block(study, models, head_paths.get(name), target_paths.get(name),
                                (engine_notes or {}).get(name))
        lines.append("")
    lines += validation_lines
    lines.append(SECTION_END)
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """`text` (summary.txt) with its MoE section replaced by `section` (appended when absent)."""
    from src import outputs
    return outputs.replace_section(text, section, SECTION_BEGIN, SECTION_END)


def kept_section(out_dir: str) -> str | None:
    """The MoE section of OUT/results/summary.txt, for a study run that rewrites the file."""
    import os
    path = os.path.join(out_dir, "results", "summary.txt")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        summary = f.read()
    if SECTION_BEGIN in summary and SECTION_END in summary:
        body = summary.split(SECTION_BEGIN, 1)[1].split(SECTION_END, 1)[0]
        return SECTION_BEGIN + body + SECTION_END
    return None
