"""The decode worker's launch per engine, for `recommend` on a disaggregated deployment
(src/disagg/recommend.py): the aggregated printers' speculation settings (src/online/
engine_blocks.py, src/online/trtllm_snippet.py) with the engine's own P/D and parallelism flags.

Read in each engine's source at the version recommend names for it:

SGLang v0.5.10.post1 (the PyPI wheel, python/sglang/srt/server_args.py): --disaggregation-mode
  {null, prefill, decode}; --disaggregation-transfer-backend (mooncake, the default, nixl, ...);
  --tp-size is every GPU of the server and --dp-size its attention-DP ranks with
  --enable-dp-attention (`_handle_data_parallelism`: tp_size % dp_size == 0, attention TP =
  tp / dp); --ep-size; --moe-a2a-backend deepep (`_handle_a2a_moe` sets ep_size = tp_size) and
  --deepep-mode {normal, low_latency, auto}: low_latency, the kernels a decode batch runs
  (auto's choice for decode) and whose tables price the all-to-all (src/kernels/a2a_table.py).
  EAGLE/MTP on a decode server runs (disaggregation/decode_schedule_batch_mixin.py builds the
  EagleDraftInput); SGLang issue #6684 (2025-06: MTP + PD + DP attention failed) was followed by
  PR #7420 ("PD disaggregation when enable mtp and tp!=dp", merged 2025-06-21), and server_args
  of v0.5.10.post1 refuses only STANDALONE drafting with DP attention.
vLLM 0.24.0 (the PyPI wheel, vllm/engine/arg_utils.py): --tensor-parallel-size (per DP rank),
  --data-parallel-size, --enable-expert-parallel (EP over tp x dp), --all2all-backend
  (vllm/config/parallel.py All2AllBackend: deepep_low_latency, ...), --kv-transfer-config
  (vllm/config/kv_transfer.py: kv_connector, kv_role in kv_producer / kv_consumer / kv_both;
  NixlConnector registered in distributed/kv_transfer/kv_connector/factory.py).
TensorRT-LLM (llm_args.py): the generation worker's YAML adds enable_attention_dp (attention DP
  over all tp_size ranks: one GPU per rank, so a rank of attention TP > 1 with DP cannot be
  expressed) and cache_transceiver_config.backend (DEFAULT, UCX, NIXL, MOONCAKE, MPI) to the
  speculative_config recommend prints aggregated; trtllm-serve's --tp_size, --ep_size.
"""
from __future__ import annotations

import json

from src.online import engine_blocks, trtllm_snippet

SGLANG_DECODE_VERSION = "SGLang v0.5.10.post1 python/sglang/srt/server_args.py"
VLLM_DECODE_VERSION = "vLLM 0.24.0 vllm/engine/arg_utils.py"
VLLM_CONNECTOR = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def sglang_decode_flags(shape) -> list[str]:
    """SGLang's P/D and parallel flags of a decode worker of `shape` (PoolShape)."""
    flags = ["--disaggregation-mode decode", "--disaggregation-transfer-backend mooncake",
             f"--tp-size {shape.gpus_per_worker}"]
    if shape.dp > 1:
        flags += [f"--dp-size {shape.dp}", "--enable-dp-attention"]
    if shape.ep > 1:
        flags += [f"--ep-size {shape.ep}", "--moe-a2a-backend deepep",
                  "--deepep-mode low_latency"]
    return flags


def sglang_lines(st, shape) -> list[str]:
    cfg = st.cfg
    model, notes = engine_blocks.model_and_notes(cfg, st.draft_path)
    spec = engine_blocks.sglang_flags(cfg, st.sglang_gamma, st.draft_path)
    return [f"SGLang decode worker ({SGLANG_DECODE_VERSION}; one draft length for every "
            f"batch: gamma {st.sglang_gamma}, the schedule's at batch 1):",
            f"  python -m sglang.launch_server --model-path {model} "
            f"{' '.join(sglang_decode_flags(shape))} {spec}"] + notes


def vllm_decode_flags(shape) -> list[str]:
    flags = [f"--tensor-parallel-size {shape.tp}"] if shape.tp > 1 else []
    if shape.dp > 1:
        flags.append(f"--data-parallel-size {shape.dp}")
    if shape.ep > 1:
        flags += ["--enable-expert-parallel", "--all2all-backend deepep_low_latency"]
    flags.append(f"--kv-transfer-config '{json.dumps(VLLM_CONNECTOR)}'")
    return flags


def vllm_lines(st, shape) -> list[str]:
    cfg = st.cfg
    model, notes = engine_blocks.model_and_notes(cfg, st.draft_path)
    spec = engine_blocks.vllm_config(cfg, st.schedule, st.draft_path)
    if "draft_tensor_parallel_size" in spec or spec.get("method") == "draft_model":
        # vLLM runs a draft model at each DP rank's --tensor-parallel-size (DraftModelProposer
        # refuses another), not at the worker's tp x dp the cost model's TP-G path prices it at
        spec = {k: v for k, v in spec.items() if k != "draft_tensor_parallel_size"}
        if shape.tp > 1:  # after "model", where the aggregated printer puts it
            items = list(spec.items())
            at = [k for k, _ in items].index("model") + 1
            spec = dict(items[:at] + [("draft_tensor_parallel_size", shape.tp)] + items[at:])
    lines = [f"vLLM decode worker ({VLLM_DECODE_VERSION}; gamma by the number of scheduled "
             "requests):",
             f"  vllm serve {model} {' '.join(vllm_decode_flags(shape))} --speculative-config "
             f"'{json.dumps(spec)}'"]
    if shape.dp > 1:
        lines.append(f"  (the schedule counts the worker's requests; with --data-parallel-size "
                     f"{shape.dp} each DP engine schedules its own, about 1/{shape.dp} of them; "
                     "vLLM documents dynamic speculative decoding as off for data parallel > 1: "
                     "measure before relying on the per-batch-size list)")
    return lines + notes


def trtllm_refusal(shape) -> str | None:
    """Why TensorRT-LLM cannot run the decode worker, or None."""
    if shape.dp > 1 and shape.tp > 1:
        return (f"TensorRT-LLM's enable_attention_dp runs attention DP over every one of the "
                f"worker's {shape.gpus_per_worker} ranks (attention TP 1); decode_tp {shape.tp} "
                f"with decode_dp {shape.dp} is not a shape it takes (allowed: decode_tp 1, or "
                "decode_dp 1)")
    return None


def trtllm_lines(st, shape) -> list[str]:
    cfg = st.cfg
    model, notes = engine_blocks.model_and_notes(cfg, st.draft_path)
    why = trtllm_refusal(shape)
    if why:
        return [f"TensorRT-LLM: not printed: {why}."]
    options, _ = trtllm_snippet.extra_options(cfg.scenario.draft, st.schedule.ranges,
                                              st.draft_path)
    options = {**options, "enable_attention_dp": shape.dp > 1,
               "cache_transceiver_config": {"backend": "DEFAULT"}}
    ep = f" --ep_size {shape.ep}" if shape.ep > 1 else ""
    lines = [f"TensorRT-LLM generation (decode) worker (keys of {trtllm_snippet.TRTLLM_SOURCE}; "
             "list it under generation_servers of trtllm-serve disaggregated's config):",
             "  cat > gen.yaml <<'EOF'"]
    lines += ["  " + x for x in trtllm_snippet.to_yaml(options)]
    lines += ["  EOF",
              f"  trtllm-serve {model} --backend pytorch --tp_size {shape.gpus_per_worker}{ep} "
              f"--max_batch_size {cfg.limits.max_num_seqs} --extra_llm_api_options gen.yaml"]
    return lines + notes


def decode_snippet(shape):
    """recommend_all.engine_section's snippet(profile, st) for a decode worker of `shape`."""
    def snippet(profile: str, st) -> list[str]:
        if profile == "trtllm":
            return trtllm_lines(st, shape)
        if profile == "sglang":
            return sglang_lines(st, shape)
        return vllm_lines(st, shape)
    return snippet
