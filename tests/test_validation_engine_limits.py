"""Each engine's default scheduler limits on a measured deployment's GPU
(src/validation/engine_limits.py), pinned to the engine source lines they come from, and the
validation's serve config taking them."""
import pytest

from src.costmodel.presets import load_presets
from src.validation.engine_limits import engine_limits, gpu_memory_gib
from src.validation.silicon_rows import SiliconCase
from src.validation.silicon_serve import serve_config


@pytest.mark.parametrize("gpu, tokens", [
    # sglang server_args.py _handle_gpu_memory_settings: 8192 below 160 GiB (H100, H200),
    # 16384 above (B200, GB200)
    ("h100-sxm", 8192), ("h200", 8192), ("b200", 16384), ("gb200", 16384),
    # 4096 below 60 GiB (L40S, 48 GB = 44.7 GiB), 2048 below 35 (L4, 24 GB)
    ("l40s", 4096), ("l4", 2048)])
def test_sglang_chunked_prefill_size_by_gpu_memory(gpu, tokens):
    g = load_presets().gpu(gpu)
    for engine in ("sglang", "sglang-spec-v2"):
        assert engine_limits(engine, g.memory_gb, g.name).max_num_batched_tokens == tokens


def test_vllm_openai_server_defaults():
    # vllm/engine/arg_utils.py get_batch_defaults: >= 70 GiB and not an A100 -> 8192 / 1024
    presets = load_presets()
    for gpu in ("h100-sxm", "h200", "b200"):
        g = presets.gpu(gpu)
        lim = engine_limits("vllm-v1", g.memory_gb, g.name)
        assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (8192, 1024)
    a100 = presets.gpu("a100-80gb-sxm")  # 80 GB, but "a100" in the name: 2048 / 256
    lim = engine_limits("vllm-v1", a100.memory_gb, a100.name)
    assert (lim.max_num_batched_tokens, lim.max_num_seqs) == (2048, 256)


def test_trtllm_max_num_tokens_and_unknown_profiles():
    assert engine_limits("trtllm", 180.0).max_num_batched_tokens == 8192  # BuildConfig
    assert engine_limits("ideal", 180.0).max_num_batched_tokens == 8192  # EngineLimits' own


def test_gib_conversion():
    assert gpu_memory_gib(141.0) == pytest.approx(131.32, abs=0.01)  # H200: below 160 GiB
    assert gpu_memory_gib(180.0) == pytest.approx(167.64, abs=0.01)  # B200: above


def test_the_validation_serves_with_the_engines_limits():
    def case(system, gpu, backend, engine):
        return SiliconCase(row_id="t", system=system, backend=backend, gpu=gpu,
                           model="Qwen/Qwen3-32B", engine=engine, tp=2, ep=1,
                           weight_format="bf16", expert_weight_format="", isl=1024, osl=128,
                           concurrency=16, measured_tpot_ms=10.0, measured_ttft_ms=100.0)
    b200 = serve_config(case("b200_sxm", "b200", "sglang", "sglang"))
    h100 = serve_config(case("h100_sxm", "h100-sxm", "sglang", "sglang"))
    trt = serve_config(case("b200_sxm", "b200", "trtllm", "trtllm"))
    assert b200.limits.max_num_batched_tokens == 16384
    assert h100.limits.max_num_batched_tokens == 8192
    assert trt.limits.max_num_batched_tokens == 8192
