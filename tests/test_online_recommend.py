"""`python run.py recommend`: the verdict, a --speculative-config vLLM's parser accepts, SGLang
flags, and one-line errors."""
import json
import re

import pytest

from src.online.policies import parse_schedule_json
from tests.helpers import run_captured

BASE = ["--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b"]


def run(*args):
    """`python run.py recommend ARGS`, in this process."""
    return run_captured(["recommend", *args])


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


# vLLM v0.6.x's speculative-decoding flags (vllm/engine/arg_utils.py, EngineArgs.add_cli_args,
# v0.6 series) and the v2 block manager switch its spec decode needed before v0.6.2
V06_FLAGS = {"--speculative-model", "--num-speculative-tokens",
             "--speculative-draft-tensor-parallel-size", "--speculative-max-model-len",
             "--speculative-disable-by-batch-size", "--ngram-prompt-lookup-max",
             "--ngram-prompt-lookup-min", "--use-v2-block-manager", "--tensor-parallel-size"}


def vllm_v06_flags(stdout: str) -> dict:
    """The flags of the printed `vllm serve` line, {flag: value or None}."""
    line = re.search(r"^  vllm serve \S+ (.*)$", stdout, re.M).group(1)
    flags, tokens = {}, line.replace("'[ngram]'", "[ngram]").split()
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            flags[tok] = None if nxt is None or nxt.startswith("--") else nxt
    return flags


def test_batch_mode_prints_a_schedule_vllm_accepts_and_sglang_flags():
    p = run(*BASE, "--acceptance", "0.7", "--engine", "vllm-v1", "--batch", "1,8,64")
    assert p.returncode == 0, p.stderr
    cfg = vllm_config(p.stdout)
    check_vllm_shape(cfg)
    assert cfg["method"] == "draft_model" and cfg["model"] == "meta-llama/Llama-3.2-1B"
    p = run(*BASE, "--acceptance", "0.7", "--engine", "vllm-2024", "--batch", "1,8,64")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("Recommendation: speculate while at most")
    flags = re.search(r"launch_server .*", out).group(0)
    steps = int(re.search(r"--speculative-num-steps (\d+)", flags).group(1))
    assert "--speculative-algorithm STANDALONE" in flags
    assert f"--speculative-num-draft-tokens {steps + 1}" in flags
    assert "--speculative-eagle-topk 1" in flags
    assert "Range over the batch sizes asked: TPOT" in out and "Assumptions:" in out


def test_low_acceptance_says_do_not_speculate_and_prints_no_config():
    # one engine's verdict (the default, --engine all, gives one per engine)
    p = run(*BASE, "--acceptance", "0.15", "--batch", "1,16", "--engine", "vllm-v1")
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
    assert set(vllm_v06_flags(p.stdout)) <= V06_FLAGS
    assert "Schedule optimised for: the steady state (every sequence at the sharegpt " in p.stdout


def test_vllm_2024_prints_the_flags_vllm_06_accepts_not_the_v1_json():
    """The vllm-2024 profile models vLLM v0.6, whose parser has no --speculative-config and no
    per-batch-size schedule: the printed line uses only v0.6's flags, with
    --speculative-disable-by-batch-size where speculation stops paying."""
    p = run(*BASE, "--acceptance", "0.7", "--engine", "vllm-2024", "--batch", "1,8,64")
    assert p.returncode == 0, p.stderr
    assert "num_speculative_tokens_per_batch_size" not in p.stdout
    assert "--speculative-config" not in p.stdout and "draft_model" not in p.stdout
    assert "vLLM v0.6 (the engine the vllm-2024 profile models" in p.stdout
    flags = vllm_v06_flags(p.stdout)
    assert set(flags) <= V06_FLAGS, flags
    assert flags["--speculative-model"] == "meta-llama/Llama-3.2-1B"
    last_on = int(re.search(r"speculate while at most (\d+) sequences", p.stdout).group(1))
    assert flags["--speculative-disable-by-batch-size"] == str(last_on + 1)
    gamma = int(flags["--num-speculative-tokens"])
    assert f"gamma {gamma}, the schedule's at batch 1" in p.stdout
    p = run("--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "ngram",
            "--acceptance", "0.7", "--engine", "vllm-2024", "--batch", "1,4")
    assert p.returncode == 0, p.stderr
    flags = vllm_v06_flags(p.stdout)
    assert set(flags) <= V06_FLAGS and flags["--speculative-model"] == "[ngram]"
    assert int(flags["--ngram-prompt-lookup-max"]) >= int(flags["--ngram-prompt-lookup-min"])


def schedule_ranges(stdout: str) -> list:
    return vllm_config(stdout)["num_speculative_tokens_per_batch_size"]


@pytest.mark.parametrize("args, blips", [
    (["--gpu", "h200", "--target", "llama-3.1-8b", "--draft", "ngram", "--acceptance", "0.5"], 1),
    (["--gpu", "h200", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b", "--acceptance",
      "0.7", "--tp", "2"], 0),
])
def test_schedules_do_not_flip_flop_on_flat_objectives(args, blips):
    """Issue 19's two cases (19 ranges; one-batch blips such as [85,85,1],[86,86,2],[87,1024,1]):
    at the default 6% tolerance a schedule has fewer ranges than the per-batch best (--tolerance
    0), a one-batch range only where the model has a step above the tolerance, and
    every batch size where gamma rises again gets a line saying why."""
    p = run(*args)
    assert p.returncode == 0, p.stderr
    ranges = schedule_ranges(p.stdout)
    literal = schedule_ranges(run(*args, "--tolerance", "0").stdout)
    assert len(ranges) < len(literal) and len(ranges) <= 6, (ranges, literal)
    assert sum(hi == lo for lo, hi, _ in ranges[:-1]) <= blips, ranges
    for r0, r1 in zip(ranges, ranges[1:]):
        if r1[2] > r0[2]:
            assert f"gamma rises from {r0[2]} to {r1[2]} at batch {r1[0]}: " in p.stdout
    assert "gamma switches only where another is modelled faster by more than 6%" in p.stdout


def test_a_rising_gamma_is_explained():
    """At a 1% tolerance the 70B TP-2 schedule still rises once with batch size: the output says
    where and why. pytorch-graphs: the H200's own calibration prices it (GEMM wave quantisation);
    vllm-v1's GEMM efficiencies re-fitted to measured kernels give a monotone schedule here."""
    p = run("--gpu", "h200", "--target", "llama-3.1-70b", "--draft", "llama-3.2-1b",
            "--acceptance", "0.7", "--tp", "2", "--tolerance", "0.01", "--engine",
            "pytorch-graphs")
    assert p.returncode == 0, p.stderr
    ranges = schedule_ranges(p.stdout)
    ups = [(r1[0], r0[2], r1[2]) for r0, r1 in zip(ranges, ranges[1:]) if r1[2] > r0[2]]
    assert ups
    for b, g0, g1 in ups:
        assert re.search(rf"gamma rises from {g0} to {g1} at batch {b}: \S", p.stdout), p.stdout


def test_a_best_gamma_at_max_gamma_is_flagged():
    p = run(*BASE, "--acceptance", "0.95", "--max-gamma", "4", "--batch", "1,8")
    assert p.returncode == 0, p.stderr
    assert re.search(r"The best gamma is --max-gamma 4 at batch 1 \(and at \d+ more batch sizes?, "
                     r"up to \d+\): "
                     r"the optimum may lie above the grid: try --max-gamma 8\.", p.stdout)
    p = run(*BASE, "--acceptance", "0.6", "--batch", "1,8")
    assert "may lie above the grid" not in p.stdout


def test_tolerance_outside_its_range_is_one_line():
    line = one_line_error(run(*BASE, "--acceptance", "0.7", "--tolerance", "2"), "--tolerance")
    assert "0..0.5" in line


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


def sglang_resolved(flags: str) -> dict:
    """What SGLang makes of the printed flags, by the rules of its source (sgl-project/sglang,
    python/sglang/srt/arg_groups/speculative_hook.py `_handle_ngram` / `_handle_eagle_family`;
    cpp_ngram/param.h `get_draft_token_num`): NGRAM sets topk = --speculative-ngram-max-bfs-breadth
    (default 10, min breadth default 1), num_draft_tokens defaults to 12 and the n-gram cache
    drafts num_draft_tokens - 1 tokens after the last verified one; EAGLE/STANDALONE with topk 1
    set num_draft_tokens = num_steps + 1. Returns the BFS breadth (1 = one continuation per level)
    and the number of draft tokens a step verifies."""
    tokens = flags.split()
    args = dict(zip(tokens[::2], tokens[1::2]))
    assert all(k.startswith("--") for k in args), flags  # flag/value pairs, nothing dangling
    if args["--speculative-algorithm"] == "NGRAM":
        assert "--speculative-eagle-topk" not in args  # overwritten by SGLang: misleading
        assert "--speculative-num-steps" not in args  # not read by the n-gram drafter
        breadth = int(args.get("--speculative-ngram-max-bfs-breadth", 10))
        min_breadth = int(args.get("--speculative-ngram-min-bfs-breadth", 1))
        assert 1 <= min_breadth <= breadth  # the n-gram cache's own check (ngram.cpp)
        return {"breadth": breadth,
                "drafts": int(args.get("--speculative-num-draft-tokens", 12)) - 1}
    topk, steps = int(args["--speculative-eagle-topk"]), int(args["--speculative-num-steps"])
    drafts = int(args["--speculative-num-draft-tokens"])
    if topk == 1:
        drafts = steps + 1
    return {"breadth": topk, "drafts": drafts - 1}


def sglang_flags_of(stdout: str) -> tuple[str, int]:
    line = re.search(r"launch_server --model-path \S+ (.*)", stdout).group(1)
    gamma = int(re.search(r"gamma (\d+), the schedule's at batch 1", stdout).group(1))
    return line, gamma


@pytest.mark.parametrize("draft", ["ngram", "llama-3.2-1b"])
def test_sglang_flags_give_a_chain_of_gamma_drafts(draft):
    # one engine's schedule under both lines (--engine all prices SGLang with its own profile)
    p = run("--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", draft,
            "--acceptance", "0.7", "--batch", "1,4", "--engine", "vllm-v1")
    assert p.returncode == 0, p.stderr
    flags, gamma = sglang_flags_of(p.stdout)
    assert gamma == vllm_config(p.stdout)["num_speculative_tokens_per_batch_size"][0][2]
    assert sglang_resolved(flags) == {"breadth": 1, "drafts": gamma}
    if draft == "ngram":
        assert "--speculative-ngram-max-bfs-breadth 1" in flags


def test_the_resolver_sees_the_old_ngram_flags_as_a_tree():
    """The flags printed before (topk 1, num-steps) leave SGLang's default BFS breadth of 10."""
    old = ("--speculative-algorithm NGRAM --speculative-num-steps 8 --speculative-eagle-topk 1 "
           "--speculative-num-draft-tokens 9")
    with pytest.raises(AssertionError):
        sglang_resolved(old)


def one_line_error(p, flag: str) -> str:
    assert p.returncode == 2, p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}: "), p.stderr
    assert p.stdout == ""
    return lines[0]


@pytest.mark.parametrize("target, draft, sizes", [
    ("llama-3.1-8b", "qwen2.5-0.5b", ("151936", "128256")),
    ("llama-2-7b", "llama-3.2-1b", ("128256", "32000")),
])
def test_a_draft_with_another_vocabulary_is_refused(target, draft, sizes):
    line = one_line_error(run("--gpu", "h100-sxm", "--target", target, "--draft", draft,
                              "--acceptance", "0.7"), "--draft")
    assert all(s in line for s in sizes) and "vocabulary" in line
    assert draft not in line.split("allowed:")[1]
    from src.costmodel import load_presets
    models = load_presets().models
    allowed = line.split("allowed: ")[1].split(", ")
    assert all(models[m].vocab_size == models[target].vocab_size
               for m in allowed if m not in ("eagle", "ngram"))


def test_a_draft_with_the_same_vocabulary_runs():
    p = run("--gpu", "h100-sxm", "--target", "llama-2-7b", "--draft", "llama-68m",
            "--acceptance", "0.7", "--batch", "1")
    assert p.returncode == 0, p.stderr


def test_self_draft_is_not_offered():
    line = one_line_error(run(*BASE[:4], "--draft", "self", "--acceptance", "0.7"), "--draft")
    assert "self" not in line.split("allowed:")[1]


def test_a_context_that_does_not_fit_names_the_option_and_the_deployment():
    line = one_line_error(run(*BASE, "--acceptance", "0.7", "--batch", "1",
                              "--context", "1000000"), "--context")
    assert "llama-3.2-1b" in line and "llama-3.1-8b" in line
    most = int(line.rsplit("up to ", 1)[1])
    p = run(*BASE, "--acceptance", "0.7", "--batch", "1", "--context", str(most))
    assert p.returncode == 0, p.stderr
    one_line_error(run(*BASE, "--acceptance", "0.7", "--batch", "1", "--context",
                       str(most + 1)), "--context")


@pytest.mark.parametrize("batch", ["1,,8", "1,8,", ",1"])
def test_batch_list_with_an_empty_item_is_refused_like_rate(batch):
    line = one_line_error(run(*BASE, "--acceptance", "0.7", "--batch", batch), "--batch")
    assert "empty item" in line


@pytest.mark.parametrize("args, flag", [
    (["--draft", "llama-3.2-1b", "--batch", "4", "--requests", "50"], "--requests"),
    (["--draft", "ngram", "--draft-model-path", "x/y"], "--draft-model-path"),
    (["--draft", "ngram", "--draft-tp", "2"], "--draft-tp"),
])
def test_options_the_run_would_ignore_are_refused(args, flag):
    one_line_error(run(*BASE[:4], *args, "--acceptance", "0.7"), flag)


def test_acceptance_help_says_what_is_enforced():
    from src.config import ALPHA_CLIP
    from src.online.recommend import make_parser
    text = make_parser().format_help()
    assert f"{ALPHA_CLIP[0]:g}..{ALPHA_CLIP[1]:g}" in " ".join(text.split())
    one_line_error(run(*BASE, "--acceptance", str(ALPHA_CLIP[1] + 0.0005)), "--acceptance")
    p = run(*BASE, "--acceptance", str(ALPHA_CLIP[1]), "--batch", "1")
    assert p.returncode == 0, p.stderr


def test_eagle_head_runs_at_the_target_tp_by_default():
    p = run("--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "eagle", "--tp", "2",
            "--draft-model-path", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "--acceptance", "0.7",
            "--batch", "1")
    assert p.returncode == 0, p.stderr


def test_a_draft_model_runs_at_the_target_tp_as_vllm_requires():
    """vLLM V1's DraftModelProposer refuses draft_tensor_parallel_size != tensor_parallel_size,
    whose default it is (vllm/v1/spec_decode/draft_model.py)."""
    p = run(*BASE, "--acceptance", "0.7", "--tp", "2", "--batch", "1")
    assert p.returncode == 0, p.stderr
    cfg = vllm_config(p.stdout)
    assert cfg.get("draft_tensor_parallel_size", 2) == 2
    assert "--tensor-parallel-size 2" in p.stdout
    line = one_line_error(run(*BASE, "--acceptance", "0.7", "--draft-tp", "2"), "--draft-tp")
    assert line.endswith("allowed: 1 (--tp)")
    line = one_line_error(run("--gpu", "h100-sxm", "--target", "llama-2-70b", "--draft",
                              "llama-68m", "--tp", "8", "--acceptance", "0.7"), "--tp")
    assert "llama-68m" in line
