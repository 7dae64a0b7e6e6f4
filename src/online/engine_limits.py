"""The scheduler limits each engine launches with by default, for a measured deployment's GPU.

silicon_sample.csv's deployments were launched with the engines' defaults (nothing in a row says
otherwise), so the validation's simulated engine takes each engine's own per-step token budget
and running-request cap instead of vLLM's for all three (EngineLimits' defaults):

- vllm-v1: max_num_batched_tokens 8192 and max_num_seqs 1024 for the OpenAI-compatible server
  on a GPU of >= 70 GiB that is not an A100 (vllm/engine/arg_utils.py, EngineArgs.
  get_batch_defaults: UsageContext.OPENAI_API_SERVER), else 2048 and 256.
- sglang (and sglang-spec-v2): chunked_prefill_size, the most prompt tokens one prefill batch
  takes, by GPU memory (python/sglang/srt/server_args.py, ServerArgs._handle_gpu_memory_settings,
  the same table engines.toml's cuda_graph_max_batch_by_gpu_memory reads): 2048 below 35 GiB,
  4096 below 60, 8192 below 160 (H100, A100 80 GB, H20, H200), 16384 above (B200, GB200, MI300).
  Running requests: max_running_requests is unset by default and bounded by the KV pool, which
  the simulated engine bounds itself; EngineLimits' 1024 stands (no measured row has more).
- trtllm: max_num_tokens 8192 (BuildConfig's default, which the PyTorch backend's LLM args and
  trtllm-serve take; TensorRT-LLM's own test harness ServerConfig says "8192 is default value in
  BuildConfig"); max_batch_size 2048 there, above every measured concurrency, so 1024 stands.

serve (src/online/cli.py) takes the same limits as its defaults on the scenario's GPU
(scenario_limits); an option or a [serving] key still wins.

GPU memory is compared in GiB as the engines do (torch's total memory / 2^30): gpus.toml's
datasheet GB (1e9 bytes) is converted; no bound lies within the HBM the driver reserves.
"""
from __future__ import annotations

from src.online.engine_types import EngineLimits

GIB = 2 ** 30
# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OPENAI_API_SERVER)
VLLM_LARGE_GPU_GIB = 70
VLLM_SERVER_TOKENS_LARGE, VLLM_SERVER_SEQS_LARGE = 8192, 1024
VLLM_SERVER_TOKENS_SMALL, VLLM_SERVER_SEQS_SMALL = 2048, 256
# sglang server_args.py _handle_gpu_memory_settings: (below GiB, chunked_prefill_size)
SGLANG_CHUNKED_PREFILL_BY_GIB = ((35, 2048), (60, 4096), (160, 8192), (float("inf"), 16384))
# TensorRT-LLM BuildConfig.max_num_tokens
TRTLLM_MAX_NUM_TOKENS = 8192


def gpu_memory_gib(memory_gb: float) -> float:
    """A datasheet capacity in GB (1e9 bytes) in GiB, as the engines read torch's figure."""
    return memory_gb * 1e9 / GIB


def engine_limits(engine: str, gpu_memory_gb: float, gpu_name: str = "") -> EngineLimits:
    """The default EngineLimits of an engine profile on a GPU of gpu_memory_gb (datasheet GB);
    EngineLimits' own (vLLM's on a large GPU) for a profile this module does not name."""
    gib = gpu_memory_gib(gpu_memory_gb)
    base = EngineLimits()
    if engine == "vllm-v1":
        if gib >= VLLM_LARGE_GPU_GIB and "a100" not in gpu_name.lower():
            return EngineLimits(VLLM_SERVER_SEQS_LARGE, VLLM_SERVER_TOKENS_LARGE,
                                base.block_size_tokens)
        return EngineLimits(VLLM_SERVER_SEQS_SMALL, VLLM_SERVER_TOKENS_SMALL,
                            base.block_size_tokens)
    if engine in ("sglang", "sglang-spec-v2"):
        tokens = next(t for below, t in SGLANG_CHUNKED_PREFILL_BY_GIB if gib < below)
        return EngineLimits(base.max_num_seqs, tokens, base.block_size_tokens)
    if engine == "trtllm":
        return EngineLimits(base.max_num_seqs, TRTLLM_MAX_NUM_TOKENS, base.block_size_tokens)
    return base


def replica_limits(engine: str, limits: EngineLimits, attention_dp: int) -> EngineLimits:
    """A replica's limits from one attention-DP rank's `limits` (the engine's defaults): every
    rank has its own scheduler (vLLM's DP engine cores, TensorRT-LLM's and SGLang's DP ranks), so
    the replica runs attention_dp x max_num_seqs and attention_dp x the token budget; SGLang
    gives each rank chunked_prefill_size // dp_size (server_args.py `_handle_data_parallelism`,
    src/disagg/prefill_budget.py), so its replica's budget stays the chunk (rounded down to a
    multiple of dp). attention_dp 1: `limits` itself."""
    if attention_dp == 1:
        return limits
    tokens = limits.max_num_batched_tokens
    tokens = (tokens // attention_dp) * attention_dp if engine in ("sglang", "sglang-spec-v2") \
        else tokens * attention_dp
    return EngineLimits(limits.max_num_seqs * attention_dp, max(tokens, attention_dp),
                        limits.block_size_tokens)


def scenario_limits(engine: str, scenario) -> EngineLimits:
    """The engine's default limits on a hardware scenario's GPU (its gpu_id, in its presets),
    for the scenario's replica of attention_dp ranks (replica_limits)."""
    from src.costmodel import load_presets

    gpu = load_presets(scenario.preset_paths).gpu(scenario.gpu_id)
    return replica_limits(engine, engine_limits(engine, gpu.memory_gb, gpu.name),
                          getattr(scenario, "attention_dp", 1))


MAX_NUM_SEQS_HELP = (
    "running-request cap, vLLM max_num_seqs (default: the engine's own on the scenario's GPU, "
    "e.g. vLLM V1's 1024 on an H100, 256 on an A100 or L40S)")
MAX_NUM_BATCHED_TOKENS_HELP = (
    "per-step token budget, vLLM max_num_batched_tokens (default: the engine's own on the "
    "scenario's GPU, e.g. vLLM V1's 8192 on an H100, 2048 on an A100 or L40S; SGLang's "
    "chunked_prefill_size, 8192 on an H100, 16384 on a B200; TensorRT-LLM's max_num_tokens, 8192)")
