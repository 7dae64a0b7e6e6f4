"""The prefill token budget of one prefill server (an attention-DP rank of a prefill worker):
how many prompt tokens one batched prefill pass may hold (src/disagg/prefill_front.py).

    sglang, sglang-spec-v2   chunked_prefill_size on the prefill GPU (src/online/engine_limits.py,
                             the one copy of SGLang's rule: 8192 below 160 GiB (H100, H200),
                             16384 above (B200), 4096 / 2048 below 60 / 35 GiB), under attention
                             DP divided by dp_size, each DP rank's scheduler getting the quotient
                             (SGLang python/sglang/srt/server_args.py, v0.5 series:
                             `_handle_data_parallelism`, "chunked_prefill_size // dp_size"). Its
                             max_prefill_tokens (16384) is the looser of SGLang's two limits at
                             these sizes.
    every other profile      serve's max_num_batched_tokens (its default the engine's own on the
                             run's GPU, src/online/engine_limits.py: vLLM V1's 8192 on a >= 70 GiB
                             GPU that is not an A100, else 2048; TensorRT-LLM's max_num_tokens
                             8192), per DP rank (vLLM's DP ranks are engine cores each with its
                             own scheduler)
"""
from __future__ import annotations

from src.online.engine_limits import engine_limits

SGLANG_PROFILES = ("sglang", "sglang-spec-v2")


def prefill_token_budget(engine_profile: str, gpu, dp: int, max_num_batched_tokens: int) -> int:
    """Prompt tokens per batched prefill pass of one DP rank (module docstring)."""
    if engine_profile in SGLANG_PROFILES:
        chunk = engine_limits(engine_profile, gpu.memory_gb, gpu.name).max_num_batched_tokens
        return max(chunk // dp, 1)
    return int(max_num_batched_tokens)
