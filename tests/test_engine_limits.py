"""Each engine's default scheduler limits on a measured deployment's GPU
(src/online/engine_limits.py), pinned to the engine source lines they come from, and the
validation's serve config taking them."""
import pytest

from src.costmodel.presets import load_presets
from src.online.engine_limits import engine_limits, gpu_memory_gib
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


H100_SCENARIO = "configs/scenarios/h100-llama8b-1b.toml"  # vllm-v1, sglang and trtllm profiles


def _serve_limits(*args):
    from src.online.cli import config_from_args, make_parser
    return config_from_args(make_parser().parse_args(["--rates", "1", *args])).limits


@pytest.mark.parametrize("scenario, engine", [
    (H100_SCENARIO, "vllm-v1"), (H100_SCENARIO, "sglang"), (H100_SCENARIO, "trtllm"),
    ("configs/scenarios/a100-llama8b-1b.toml", "vllm-v1"),
    ("configs/scenarios/l40s-llama8b-1b.toml", "vllm-v1"),
    ("configs/scenarios/moe-gpt-oss-120b-eagle3-b200.toml", "sglang"),
    ("configs/scenarios/moe-gpt-oss-120b-eagle3-b200.toml", "vllm-v1")])
def test_serve_defaults_to_the_engines_own_limits_on_the_scenarios_gpu(scenario, engine):
    from src.online.cli import load_serving_scenario
    gpu = load_presets().gpu(load_serving_scenario(scenario)[0].gpu_id)
    want = engine_limits(engine, gpu.memory_gb, gpu.name)
    got = _serve_limits("--scenario", scenario, "--engine", engine)
    assert (got.max_num_seqs, got.max_num_batched_tokens) == \
        (want.max_num_seqs, want.max_num_batched_tokens)


def test_serve_defaults_name_the_engine_source_figures():
    a100 = _serve_limits("--scenario", "configs/scenarios/a100-llama8b-1b.toml")
    b200 = _serve_limits("--scenario", "configs/scenarios/moe-gpt-oss-120b-eagle3-b200.toml",
                         "--engine", "sglang")
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)  # get_batch_defaults
    assert b200.max_num_batched_tokens == 16384  # SGLang chunked_prefill_size above 160 GiB
    default = _serve_limits()  # the default scenario: vLLM V1 on an H100, as before
    assert (default.max_num_seqs, default.max_num_batched_tokens) == (1024, 8192)


def test_an_explicit_option_or_serving_key_wins_over_the_engines_default():
    a100 = "configs/scenarios/a100-llama8b-1b.toml"
    got = _serve_limits("--scenario", a100, "--max-num-seqs", "512",
                        "--max-num-batched-tokens", "4096")
    assert (got.max_num_seqs, got.max_num_batched_tokens) == (512, 4096)
    got = _serve_limits("--scenario", H100_SCENARIO, "--engine", "sglang",
                        "--max-num-batched-tokens", "3000")
    assert got.max_num_batched_tokens == 3000
    blog = _serve_limits("--scenario", "configs/scenarios/check-vllm-blog-70b-draft.toml")
    assert (blog.max_num_seqs, blog.max_num_batched_tokens) == (256, 8192)  # [serving] key


def test_a_seq_cap_above_the_engines_token_default_is_refused_in_one_line():
    from src.config import ConfigError
    with pytest.raises(ConfigError, match="--max-num-seqs|--max-num-batched-tokens"):
        _serve_limits("--scenario", "configs/scenarios/a100-llama8b-1b.toml",
                      "--max-num-seqs", "4096")


def test_vllm_v1_on_an_h100_serves_byte_identically_to_the_explicit_old_defaults(tmp_path):
    """The default scenario's run with no limits given equals one given vLLM's 1024 / 8192, the
    defaults serve had for every engine: serving.csv byte for byte."""
    from tests.helpers import run_captured
    quick = ["serve", "--rates", "2,16", "--requests", "24", "--replications", "2",
             "--policies", "none,fixed:2", "--workers", "1", "--quiet", "--no-plots"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_captured([*quick, "--out", str(a)]).returncode == 0
    assert run_captured([*quick, "--max-num-seqs", "1024", "--max-num-batched-tokens", "8192",
                         "--out", str(b)]).returncode == 0
    assert (a / "results" / "serving.csv").read_bytes() == \
        (b / "results" / "serving.csv").read_bytes()


def test_the_disaggregated_prefill_budget_reads_the_same_sglang_rule():
    from src.disagg.prefill_budget import prefill_token_budget
    presets = load_presets()
    for gpu in ("l4", "l40s", "h100-sxm", "h200", "b200"):
        g = presets.gpu(gpu)
        chunk = engine_limits("sglang", g.memory_gb, g.name).max_num_batched_tokens
        assert prefill_token_budget("sglang", g, 1, 999) == chunk
        assert prefill_token_budget("sglang-spec-v2", g, 4, 999) == chunk // 4
    assert prefill_token_budget("sglang", presets.gpu("l40s"), 1, 999) == 4096


def _recommend_limits(gpu, *args):
    from src.online.recommend import build, make_parser
    argv = ["--gpu", gpu, "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
            "--acceptance", "0.7", "--batch", "1,8", *args]
    return build(make_parser().parse_args(argv))[0].limits


def test_recommend_defaults_to_the_engines_own_limits_on_its_gpu_and_its_option_wins():
    h100, a100 = _recommend_limits("h100-sxm"), _recommend_limits("a100-80gb-sxm")
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)  # as before
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)  # get_batch_defaults
    b200 = _recommend_limits("b200", "--engine", "sglang")
    assert b200.max_num_batched_tokens == 16384  # chunked_prefill_size above 160 GiB
    mine = _recommend_limits("a100-80gb-sxm", "--max-num-seqs", "4096")
    assert (mine.max_num_seqs, mine.max_num_batched_tokens) == (4096, 4096)  # tokens >= seqs
