"""recommend's per-engine answers: the vLLM, SGLang and TensorRT-LLM blocks it prints under a
schedule, each from the engine's own printer (vLLM's --speculative-config and CUDA-graph line,
src/online/capture_note.py; SGLang's static flags, its adaptive config, src/online/
sglang_adaptive_config.py, and token trees, src/trees/recommend.py; TensorRT-LLM's YAML,
src/online/trtllm_snippet.py). `recommend --engine E` prints them all under E's schedule;
`recommend --engine all` (src/online/recommend_all.py) prints each under its own engine's.
"""
from __future__ import annotations

import json

from src.costmodel.hf_config import snippet_id_notes
from src.online import mtp_depth, trtllm_snippet
from src.online.capture_note import capture_lines
from src.treeshape.shape import TreeShape

SGLANG_ALGORITHM = {"model": "STANDALONE", "eagle": "EAGLE", "ngram": "NGRAM"}
# engine profiles of vLLM before V1: they get v0.6's command-line flags, not V1's JSON
OLD_VLLM_PROFILES = ("vllm-2024",)


def vllm_config(cfg, schedule, draft_path: str | None) -> dict:
    """The --speculative-config object (vllm/config/speculative.py field names)."""
    from src.costmodel import load_presets
    from src.hardware import moe_report
    sc = cfg.scenario
    out: dict = {}
    if sc.draft == "ngram":
        out.update(method="ngram", prompt_lookup_max=4, prompt_lookup_min=2)
    elif (kind := moe_report.draft_kind(sc.draft, load_presets().models)) != "model":
        out.update(method=moe_report.VLLM_METHOD[kind])  # eagle, eagle3; mtp: the target's layers
        if kind != "mtp":
            out["model"] = draft_path
    else:
        out.update(method="draft_model",
                   model=draft_path or load_presets().models[sc.draft].hf_name)
        if sc.draft_tp != 1:
            out["draft_tensor_parallel_size"] = sc.draft_tp
    out["num_speculative_tokens"] = schedule.num_speculative_tokens
    out["num_speculative_tokens_per_batch_size"] = [list(r) for r in schedule.ranges]
    return out


def _kind(draft: str) -> str:
    """The draft kind of a --draft value: ngram, or src/hardware/moe_report.draft_kind's (eagle,
    eagle3, mtp, model)."""
    if draft == "ngram":
        return draft
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind
    return draft_kind(draft, load_presets().models)


def vllm_v06_flags(cfg, gamma: int, draft_path: str | None, off_above: int | None) -> str:
    """The vLLM v0.6 command-line flags of one fixed gamma (vllm/engine/arg_utils.py of v0.6.x:
    --speculative-model, with '[ngram]' for prompt lookup; --num-speculative-tokens;
    --speculative-draft-tensor-parallel-size; --ngram-prompt-lookup-max/-min;
    --speculative-disable-by-batch-size, which turns speculation off, for good, for the requests
    running when the running queue holds at least that many: spec_decode_worker.py
    `_should_disable_all_speculation`; --use-v2-block-manager). An EAGLE head runs at draft TP 1
    (vLLM's v0 docs, features/spec_decode, 'EAGLE based draft models', which also say v0 reads
    EAGLE checkpoints converted to its format). v0.6 has no per-batch-size schedule."""
    sc = cfg.scenario
    kind = _kind(sc.draft)
    # v0.6.0 and v0.6.1 refuse speculation without the v2 block manager; later v0.6 releases
    # make it the default and still accept the flag
    if kind == "ngram":
        flags = ["--speculative-model '[ngram]'", f"--num-speculative-tokens {gamma}",
                 "--ngram-prompt-lookup-max 4", "--ngram-prompt-lookup-min 2"]
    else:
        from src.costmodel import load_presets
        path = draft_path or load_presets().models[sc.draft].hf_name
        flags = [f"--speculative-model {path}", f"--num-speculative-tokens {gamma}"]
        if kind == "model" and sc.draft_tp != 1:
            flags.append(f"--speculative-draft-tensor-parallel-size {sc.draft_tp}")
        elif kind != "model" and sc.tp != 1:  # v0 runs EAGLE heads without TP (vLLM docs)
            flags.append("--speculative-draft-tensor-parallel-size 1")
    flags.append("--use-v2-block-manager")
    if off_above is not None:
        flags.append(f"--speculative-disable-by-batch-size {off_above + 1}")
    return " ".join(flags)


def _sglang_kind(cfg) -> str:
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind
    sc = cfg.scenario
    return "ngram" if sc.draft == "ngram" else draft_kind(sc.draft, load_presets().models)


def sglang_draft_flags(cfg, draft_path: str | None) -> str:
    """SGLang's algorithm and draft flags of a model draft (not n-gram), before the shape's."""
    from src.costmodel import load_presets
    from src.hardware.moe_report import sglang_draft_flags as eagle_family_flags
    kind = _sglang_kind(cfg)
    if kind in ("eagle3", "mtp"):  # EAGLE3 with the head; DeepSeek MTP: EAGLE, no draft path
        return eagle_family_flags(kind, draft_path)
    path = draft_path or load_presets().models[cfg.scenario.draft].hf_name
    return f"--speculative-algorithm {SGLANG_ALGORITHM[kind]} --speculative-draft-model-path {path}"


def sglang_flags(cfg, gamma: int, draft_path: str | None) -> str:
    kind = _sglang_kind(cfg)
    if kind != "ngram":
        # EAGLE/STANDALONE with topk 1: server_args sets num_draft_tokens = num_steps + 1, a chain.
        return f"{sglang_draft_flags(cfg, draft_path)} {TreeShape.chain(gamma).sglang_flags}"
    # SGLang's NGRAM handler sets speculative_eagle_topk = speculative_ngram_max_bfs_breadth
    # (default 10: a BFS tree) and never reads num-steps for drafting; the n-gram cache proposes
    # num_draft_tokens - 1 tokens after the last verified one. Breadth 1 (= the default min
    # breadth) expands one continuation per level: gamma drafts, gamma + 1 verified positions
    # (design.md, `recommend`).
    return (f"--speculative-algorithm {SGLANG_ALGORITHM[kind]} "
            f"--speculative-ngram-max-bfs-breadth 1 --speculative-num-draft-tokens {gamma + 1}")


def model_and_notes(cfg, draft_path: str | None) -> tuple[str, list[str]]:
    """(the target's Hugging Face id, the notes on the ids the snippets print)."""
    from src.costmodel import load_presets
    sc = cfg.scenario
    models = load_presets().models
    return (models[sc.target_model_id].hf_name,
            snippet_id_notes(sc.target_model_id, sc.draft, models, draft_path))


def trtllm_block(cfg, schedule, draft_path: str | None) -> list[str]:
    """TensorRT-LLM's trtllm-serve command and YAML (src/online/trtllm_snippet.py)."""
    model, id_notes = model_and_notes(cfg, draft_path)
    sc = cfg.scenario
    return trtllm_snippet.trtllm_lines(sc.draft, schedule.ranges, draft_path, model, sc.tp,
                                       cfg.limits.max_num_seqs) + id_notes


def vllm_block(cfg, schedule, draft_path: str | None, last_on: int,
               sglang_gamma: int) -> list[str]:
    """vLLM's command: V1's --speculative-config with its CUDA-graph line, or v0.6's flags under
    a pre-V1 profile (one gamma, `sglang_gamma`, and speculation off above `last_on`)."""
    model, id_notes = model_and_notes(cfg, draft_path)
    sc = cfg.scenario
    lines = []
    tp_flag = f" --tensor-parallel-size {sc.tp}" if sc.tp > 1 else ""
    if cfg.engine_profile in OLD_VLLM_PROFILES and _kind(sc.draft) in ("eagle3", "mtp"):
        lines.append(f"vLLM v0.6 (the engine the {cfg.engine_profile} profile models) has no "
                     f"{_kind(sc.draft)} method; --engine vllm-v1 prices the engine that "
                     "has and prints its configuration.")
    elif cfg.engine_profile in OLD_VLLM_PROFILES:
        off = last_on if last_on < cfg.limits.max_num_seqs else None
        lines.append(f"vLLM v0.6 (the engine the {cfg.engine_profile} profile models: one "
                     f"draft length for every batch, gamma {sglang_gamma}, the schedule's at "
                     "batch 1; it has no per-batch-size schedule"
                     + (f"; speculation off while more than {last_on} requests run" if off
                        else "") + "):")
        lines.append(f"  vllm serve {model}{tp_flag} "
                     f"{vllm_v06_flags(cfg, sglang_gamma, draft_path, off)}")
        lines.append("  (vLLM V1 takes a gamma per batch size: --engine vllm-v1 prices that "
                     "engine and prints its configuration)")
    else:
        spec_cfg = vllm_config(cfg, schedule, draft_path)
        lines.append("vLLM (V1 dynamic speculative decoding; gamma by the number of "
                     "scheduled requests):")
        lines.append(f"  vllm serve {model}{tp_flag} --speculative-config "
                     f"'{json.dumps(spec_cfg)}'")
        lines += capture_lines(cfg, schedule)
    return lines + id_notes


def sglang_block(cfg, schedule, draft_path: str | None, last_on: int, sglang_gamma: int,
                 trees: tuple | None = None) -> list[str]:
    """SGLang's static launch flags (gamma `sglang_gamma`), its adaptive config of the schedule
    (or the line saying why not) and, with `trees` = (alpha, batches, context, rate_batches) and a
    model draft, the token-tree table."""
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind
    from src.online.sglang_adaptive_config import adaptive_lines  # its per-batch-size form
    model, id_notes = model_and_notes(cfg, draft_path)
    sc = cfg.scenario
    tp_flag = f" --tp {sc.tp}" if sc.tp > 1 else ""
    lines = [f"SGLang (one draft length for every batch: gamma {sglang_gamma}, the "
             "schedule's at batch 1):",
             f"  python -m sglang.launch_server --model-path {model}{tp_flag} "
             f"{sglang_flags(cfg, sglang_gamma, draft_path)}"]
    lines += id_notes
    if sc.draft != "ngram" and draft_kind(sc.draft, load_presets().models) in ("eagle",
                                                                               "eagle3"):
        # an EAGLE head: SGLang picks its class by config.json
        lines.append("  (the head's config.json must name LlamaForCausalLMEagle or -Eagle3: "
                     "SGLang loads a LlamaForCausalLM one, as yuhuili/EAGLE-* heads name, "
                     "as a plain Llama; its docs use the lmsys/sglang-EAGLE-* copies)")
    if last_on < cfg.limits.max_num_seqs:
        lines.append(f"  (with these static flags SGLang does not switch speculation off by "
                     f"load: above {last_on} "
                     "running sequences it costs throughput; SGLang caps running requests at "
                     "48 with speculation unless --max-running-requests is set.)")
    kind = _sglang_kind(cfg)
    launch = None if kind == "ngram" else (f"python -m sglang.launch_server --model-path "
                                           f"{model}{tp_flag} "
                                           + sglang_draft_flags(cfg, draft_path))
    lines += adaptive_lines(kind, schedule.ranges, launch)
    if trees is not None and sc.draft != "ngram":  # token trees: src/trees/recommend.py
        from src.trees.recommend import recommend_lines
        alpha, batches, context, rate_batches = trees
        lines.append("")
        lines += recommend_lines(sc, alpha, batches or [1, 2, 4, 8, 16, 32, 64], context,
                                 launch, rates=None if batches else rate_batches)
        lines += mtp_depth.tree_notes(cfg)
    return lines
