"""`recommend` on a disaggregated deployment (src/disagg/recommend.py, issue 25): the decode
worker's schedule per engine by the aggregated rule, its launch per engine passing that engine's
own parser (copies of its option lists at the version named), a shape an engine cannot take in
one line, and bad input in one line with exit 2."""
import json
import re

import pytest

from tests.helpers import run_captured
from tests.test_recommend_all_engines import schedule_of, section
from tests.test_trtllm_snippet import tiny_yaml, trtllm_validate

DSV3 = "configs/scenarios/disagg-deepseek-v3-mtp-2x8xh200.toml"
NAMES = ("vLLM", "SGLang", "TensorRT-LLM")

# SGLang v0.5.10.post1 (PyPI wheel), python/sglang/srt/server_args.py, ServerArgs.add_cli_args:
# option strings -> choices (None: any value; "flag": store_true)
SGLANG_OPTIONS = {
    "--model-path": None, "--tp-size": None, "--tensor-parallel-size": None, "--dp-size": None,
    "--data-parallel-size": None, "--ep-size": None, "--expert-parallel-size": None,
    "--ep": None, "--enable-dp-attention": "flag",
    "--moe-a2a-backend": {"none", "deepep", "mooncake", "nixl", "mori", "ascend_fuseep",
                          "flashinfer"},
    "--deepep-mode": {"normal", "low_latency", "auto"},
    "--disaggregation-mode": {"null", "prefill", "decode"},
    "--disaggregation-transfer-backend": {"mooncake", "nixl", "ascend", "fake", "mori"},
    "--speculative-algorithm": None, "--speculative-num-steps": None,
    "--speculative-eagle-topk": None, "--speculative-num-draft-tokens": None,
    "--speculative-draft-model-path": None,
}
# vLLM 0.24.0 (PyPI wheel), vllm/engine/arg_utils.py add_cli_args; All2AllBackend of
# vllm/config/parallel.py; KVRole of vllm/config/kv_transfer.py
VLLM_OPTIONS = {
    "--tensor-parallel-size": None, "--data-parallel-size": None,
    "--enable-expert-parallel": "flag", "--kv-transfer-config": None,
    "--speculative-config": None,
    "--all2all-backend": {"naive", "pplx", "deepep_high_throughput", "deepep_low_latency",
                          "deepep_v2", "mori_high_throughput", "mori_low_latency", "nixl_ep",
                          "allgather_reducescatter", "flashinfer_all2allv",
                          "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided"},
}
VLLM_KV_ROLES = {"kv_producer", "kv_consumer", "kv_both"}
# TensorRT-LLM llm_args.py: CacheTransceiverConfig.backend's Literal
TRTLLM_TRANSCEIVER = {"DEFAULT", "UCX", "NIXL", "MOONCAKE", "MPI"}


def parsed(line: str, options: dict) -> dict:
    """{option: value or True} of a launch line, every option checked against `options`
    (unknown options, a flag given a value, a value outside the choices: assertion errors)."""
    tokens = re.findall(r"'[^']*'|\S+", line)
    out, i = {}, 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1
            continue
        assert tok in options, f"{tok} is not an option of the engine's parser"
        if options[tok] == "flag":
            out[tok] = True
            i += 1
            continue
        value = tokens[i + 1].strip("'")
        assert not value.startswith("--"), tok
        if isinstance(options[tok], set):
            assert value in options[tok], (tok, value)
        out[tok] = value
        i += 2
    return out


@pytest.fixture(scope="module")
def dsv3() -> str:
    done = run_captured(["recommend", "--scenario", DSV3, "--acceptance", "0.875",
                         "--batch", "1,64"])
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_pools_are_stated_and_every_engine_answers(dsv3):
    assert "prefill pool: 1 x (tp 8, dp 1, ep 8) (prompts only; it does not speculate" in dsv3
    assert "decode pool: 1 x (tp 1, dp 8, ep 8)" in dsv3 and "16 GPUs, KV over network" in dsv3
    for name in NAMES:
        ranges = schedule_of(section(dsv3, name))
        assert ranges[0][0] == 1 and ranges[0][2] > 0, (name, ranges)


def test_sglang_decode_launch_passes_its_parser_and_rules(dsv3):
    lines = section(dsv3, "SGLang")
    line = next(x for x in lines if "sglang.launch_server" in x)
    f = parsed(line.split("sglang.launch_server", 1)[1], SGLANG_OPTIONS)
    assert f["--disaggregation-mode"] == "decode" and f["--enable-dp-attention"]
    tp, dp = int(f["--tp-size"]), int(f["--dp-size"])
    assert (tp, dp) == (8, 8) and tp % dp == 0  # _handle_data_parallelism's assert
    # _handle_a2a_moe: with deepep the EP size is the TP size (the worker's GPUs)
    assert f["--moe-a2a-backend"] == "deepep" and int(f["--ep-size"]) == tp
    k = schedule_of(lines)[0][2]
    assert f["--speculative-algorithm"] == "EAGLE" and int(f["--speculative-num-steps"]) == k
    assert f["--speculative-eagle-topk"] == "1" and int(f["--speculative-num-draft-tokens"]) \
        == k + 1


def test_vllm_decode_launch_passes_its_parser(dsv3):
    lines = section(dsv3, "vLLM")
    line = next(x for x in lines if x.startswith("  vllm serve "))
    f = parsed(line.split("vllm serve", 1)[1], VLLM_OPTIONS)
    assert int(f["--data-parallel-size"]) == 8 and "--tensor-parallel-size" not in f  # tp 1
    assert f["--enable-expert-parallel"] and f["--all2all-backend"] == "deepep_low_latency"
    kv = json.loads(f["--kv-transfer-config"])
    assert kv["kv_role"] in VLLM_KV_ROLES and kv["kv_connector"] == "NixlConnector"
    spec = json.loads(f["--speculative-config"])
    assert spec["method"] == "mtp"
    assert [tuple(r) for r in spec["num_speculative_tokens_per_batch_size"]] == \
        schedule_of(lines)
    from src.online.policies import parse_schedule_json  # the project's copy of vLLM's rules
    parse_schedule_json(json.dumps(spec))


def test_trtllm_generation_yaml_passes_its_rules(dsv3):
    yaml = pytest.importorskip("yaml")
    lines = section(dsv3, "TensorRT-LLM")
    start = lines.index("  cat > gen.yaml <<'EOF'")
    body = [x[2:] for x in lines[start + 1:lines.index("  EOF", start)]]
    options = yaml.safe_load("\n".join(body))
    assert options == tiny_yaml(body)
    trtllm_validate(options["speculative_config"])
    assert options["speculative_config"]["max_draft_len"] == schedule_of(lines)[0][2]
    assert options["enable_attention_dp"] is True
    assert options["cache_transceiver_config"]["backend"] in TRTLLM_TRANSCEIVER
    serve = next(x for x in lines if x.startswith("  trtllm-serve "))
    assert "--tp_size 8 --ep_size 8" in serve


def _scenario(tmp_path, disagg: str) -> str:
    path = tmp_path / "d.toml"
    path.write_text('[scenario]\nname = "d"\ngpu = "h100-sxm"\ntarget = "llama-3.1-8b"\n'
                    'draft = "llama-3.2-1b"\ntp = 1\n\n[study]\nbatch_sizes = [1]\n\n'
                    f"[disagg]\n{disagg}\n")
    return str(path)


def test_decode_dp1_gives_the_aggregated_schedule(tmp_path):
    """One decode worker at dp 1 and tp 2 is the aggregated replica at tp 2 (src/disagg/
    decode_step.py: bit for bit), and the steady state has no prefill in it either: every
    engine's schedule and speedups are the aggregated recommend's."""
    path = _scenario(tmp_path, "decode_workers = 1\ndecode_tp = 2\ndecode_dp = 1\n"
                               "prefill_tp = 1")
    common = ["--acceptance", "0.7", "--batch", "1,16,64"]
    dis = run_captured(["recommend", "--scenario", path, *common])
    agg = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b",
                        "--draft", "llama-3.2-1b", "--tp", "2", *common])
    assert dis.returncode == 0 and agg.returncode == 0, dis.stderr + agg.stderr
    for name in NAMES:
        assert schedule_of(section(dis.stdout, name)) == schedule_of(section(agg.stdout, name))

    def table(out):
        lines = out.splitlines()
        i = next(n for n, x in enumerate(lines) if x.startswith("At the batch sizes asked"))
        return lines[i + 1:i + 5]
    assert table(dis.stdout) == table(agg.stdout)


def test_a_shape_trtllm_cannot_take_is_one_line(tmp_path):
    path = _scenario(tmp_path, "decode_tp = 2\ndecode_dp = 2")
    done = run_captured(["recommend", "--scenario", path, "--acceptance", "0.7",
                         "--batch", "1,8"])
    assert done.returncode == 0, done.stderr
    trt = [x for x in section(done.stdout, "TensorRT-LLM") if x.startswith("TensorRT-LLM:")]
    assert len(trt) == 1 and "enable_attention_dp" in trt[0] and "decode_tp 2" in trt[0]
    assert "gen.yaml" not in done.stdout
    # vLLM's DP ranks each of attention TP 2; SGLang's --tp-size counts all 4 GPUs
    assert "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 " \
        "--data-parallel-size 2 --kv-transfer-config" in done.stdout
    assert '"draft_tensor_parallel_size": 2,' in done.stdout  # the rank's TP, vLLM's rule
    from src.disagg.config import PoolShape
    from src.disagg.decode_snippets import sglang_decode_flags
    flags = " ".join(sglang_decode_flags(PoolShape(workers=1, tp=2, ep=1, dp=2)))
    assert "--tp-size 4 --dp-size 2 --enable-dp-attention" in flags
    parsed(flags, SGLANG_OPTIONS)


@pytest.mark.parametrize("extra, start", [
    (["--disagg", "decode_dp=0"], "error: disagg.decode_dp: expected an integer >= 1"),
    (["--disagg", "decode_pp=2"], "error: --disagg: 'decode_pp=2' is not KEY=VALUE"),
    (["--disagg", "decode_ep=3"], "error: disagg.decode_ep:"),
    (["--gpu", "h200"], "error: --gpu: comes from --scenario's [scenario] table"),
    (["--rate", "1"], "error: --rate:"),
    (["--engine", "sglang"], "error: --engine:"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, extra, start):
    path = _scenario(tmp_path, "decode_tp = 1")
    done = run_captured(["recommend", "--scenario", path, "--acceptance", "0.7", *extra])
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.startswith(start) and done.stderr.count("\n") == 1, done.stderr


def test_a_scenario_without_disagg_and_missing_flags_are_refused():
    done = run_captured(["recommend", "--scenario",
                         "configs/scenarios/moe-deepseek-v3-mtp-8xh200.toml", "--acceptance",
                         "0.875"])
    assert done.returncode == 2 and done.stderr.startswith("error: --scenario:") \
        and "no [disagg] table" in done.stderr
    done = run_captured(["recommend", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
                         "--acceptance", "0.7", "--disagg", "decode_tp=1"])
    assert done.returncode == 2 and done.stderr.startswith("error: --gpu: required")
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b",
                         "--draft", "llama-3.2-1b", "--acceptance", "0.7", "--tp", "2",
                         "--disagg", "decode_tp=1"])
    assert done.returncode == 2 and done.stderr.startswith("error: --tp: a disaggregated")
    assert done.stderr.count("\n") == 1
