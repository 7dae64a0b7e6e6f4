"""`python run.py recommend`: the verdict, a --speculative-config vLLM's parser accepts, SGLang
flags, and one-line errors."""
import json
import re

import pytest

from src.online.policies import parse_schedule_json

BASE = ["--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b"]


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(*args):
    """`python run.py recommend ARGS`, in this process."""
    import contextlib
    import io

    import run as run_py

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = run_py.main(["recommend", *args])
        except SystemExit as e:  # argparse's own errors
            code = e.code
    return Result(code, out.getvalue(), err.getvalue())


def vllm_config(stdout: str) -> dict:
    match = re.search(r"--speculative-config '(\{.*\})'", stdout)
    assert match, stdout
    return json.loads(match.group(1))


def check_vllm_shape(cfg: dict) -> None:
    """What vLLM's SpeculativeConfig and validate_and_normalize_dynamic_sd_schedule accept
    (vllm/config/speculative.py, vllm/v1/spec_decode/dynamic/utils.py)."""
    assert cfg["method"] in ("draft_model", "ngram", "eagle")
    assert isinstance(cfg["num_speculative_tokens"], int) and cfg["num_speculative_tokens"] > 0
    ranges = cfg["num_speculative_tokens_per_batch_size"]
    assert isinstance(ranges, list) and ranges
    assert all(isinstance(r, list) and len(r) == 3 and all(type(v) is int for v in r)
               for r in ranges)
    assert ranges[0][0] == 1
    for (lo0, hi0, _), (lo1, _, _) in zip(ranges, ranges[1:]):
        assert lo1 == hi0 + 1  # sorted, contiguous, no overlap
    assert max(k for *_, k in ranges) == cfg["num_speculative_tokens"]
    parse_schedule_json(json.dumps(cfg))  # the project's own copy of vLLM's rules


def test_batch_mode_prints_a_schedule_vllm_accepts_and_sglang_flags():
    p = run(*BASE, "--acceptance", "0.7", "--engine", "vllm-2024", "--batch", "1,8,64")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("Recommendation: speculate while at most")
    cfg = vllm_config(out)
    check_vllm_shape(cfg)
    assert cfg["method"] == "draft_model" and cfg["model"] == "meta-llama/Llama-3.2-1B"
    assert cfg["num_speculative_tokens_per_batch_size"][-1][2] == 0  # off at large batch
    flags = re.search(r"launch_server .*", out).group(0)
    steps = int(re.search(r"--speculative-num-steps (\d+)", flags).group(1))
    assert "--speculative-algorithm STANDALONE" in flags
    assert f"--speculative-num-draft-tokens {steps + 1}" in flags
    assert "--speculative-eagle-topk 1" in flags
    assert "Range over the batch sizes asked: TPOT" in out and "Assumptions:" in out


def test_low_acceptance_says_do_not_speculate_and_prints_no_config():
    p = run(*BASE, "--acceptance", "0.15", "--batch", "1,16")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("Recommendation: do not speculate")
    assert "--speculative-config" not in p.stdout


def test_ngram_config_carries_prompt_lookup_max():
    p = run("--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "ngram",
            "--acceptance", "0.7", "--batch", "1,4")
    assert p.returncode == 0, p.stderr
    cfg = vllm_config(p.stdout)
    check_vllm_shape(cfg)
    assert cfg["method"] == "ngram" and cfg["prompt_lookup_max"] >= cfg["prompt_lookup_min"] >= 1
    assert "--speculative-algorithm NGRAM" in p.stdout


def test_rate_mode_simulates_serving():
    p = run(*BASE, "--acceptance", "0.7", "--engine", "vllm-2024", "--rate", "1,24",
            "--requests", "40")
    assert p.returncode == 0, p.stderr
    assert "simulated: sharegpt lengths" in p.stdout
    rows = re.findall(r"^\s+(1|24)\s+[\d.]+\s+([+-]\d+)%", p.stdout, re.M)
    change = {r: int(v) for r, v in rows}
    assert change["1"] < 0  # speculation lowers TPOT at a low rate
    check_vllm_shape(vllm_config(p.stdout))


@pytest.mark.parametrize("args, field", [
    (["--acceptance", "1.5"], "--acceptance"),
    (["--acceptance", "0.7", "--rate", "1", "--batch", "4"], "--rate"),
    (["--acceptance", "0.7", "--batch", "0"], "--batch"),
    (["--acceptance", "0.7", "--engine", "nosuch"], "--engine"),
    (["--acceptance", "0.7", "--batch", "100000"], "--batch"),
])
def test_bad_input_is_one_line_exit_2(args, field):
    p = run(*BASE, *args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), p.stderr


def test_unknown_gpu_and_eagle_without_a_path_are_refused():
    p = run("--gpu", "nosuch", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
            "--acceptance", "0.7")
    assert p.returncode == 2 and p.stderr.startswith("error: --gpu")
    p = run("--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle",
            "--acceptance", "0.7")
    assert p.returncode == 2 and p.stderr.startswith("error: --draft-model-path")
