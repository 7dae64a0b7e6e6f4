"""The prefill token budget of one prefill server (an attention-DP rank of a prefill worker):
how many prompt tokens one batched prefill pass may hold (src/disagg/prefill_front.py).

    sglang, sglang-spec-v2   chunked_prefill_size: 8192 on a GPU of under 160 GiB (H100, H200),
                             16384 at 160 GiB and more (B200); under attention DP divided by
                             dp_size, each DP rank's scheduler getting the quotient (SGLang
                             python/sglang/srt/server_args.py, v0.5 series:
                             `_handle_gpu_memory_settings` and `_handle_data_parallelism`,
                             "chunked_prefill_size // dp_size"). Its max_prefill_tokens (16384)
                             is the looser of SGLang's two limits at these sizes.
    every other profile      serve's max_num_batched_tokens (EngineLimits, default 8192: vLLM
                             V1's `EngineArgs.get_batch_defaults`, vllm/engine/arg_utils.py, for
                             a >= 70 GiB GPU; TensorRT-LLM's max_num_tokens is 8192 too,
                             `BuildConfig.max_num_tokens`, tensorrt_llm/builder.py), per DP rank
                             (vLLM's DP ranks are engine cores each with its own scheduler)
"""
from __future__ import annotations

SGLANG_PROFILES = ("sglang", "sglang-spec-v2")
SGLANG_LARGE_GPU_MIB = 160 * 1024  # server_args.py: gpu_mem (MiB) >= 160 GiB: B200, MI300
SGLANG_CHUNK_TOKENS = 8192  # chunked_prefill_size below that (H20, H200; H100 and A100-80G too)
SGLANG_LARGE_CHUNK_TOKENS = 16384  # chunked_prefill_size at and above it


def prefill_token_budget(engine_profile: str, gpu, dp: int, max_num_batched_tokens: int) -> int:
    """Prompt tokens per batched prefill pass of one DP rank (module docstring)."""
    if engine_profile in SGLANG_PROFILES:
        mib = gpu.memory_gb * 1e9 / 2**20
        chunk = SGLANG_LARGE_CHUNK_TOKENS if mib >= SGLANG_LARGE_GPU_MIB else SGLANG_CHUNK_TOKENS
        return max(chunk // dp, 1)
    return int(max_num_batched_tokens)
