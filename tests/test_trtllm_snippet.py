"""`recommend --engine trtllm`: the YAML parses, its keys are TensorRT-LLM's own, its schedule
passes TensorRT-LLM's validator and reads back as the project's gamma; serve and plan take the
profile.

The field names and rules below are copies of what NVIDIA/TensorRT-LLM's source says, read at:
  tensorrt_llm/llmapi/llm_args.py, commit 0004396720054fd8e205cbf616f21f0b57c6b412 (main, 2026):
    DecodingBaseConfig, EagleDecodingConfig, Eagle3DecodingConfig, NGramDecodingConfig,
    DraftTargetDecodingConfig, MTPDecodingConfig, BaseCudaGraphConfig;
    DecodingBaseConfig.validate_draft_len_schedule_and_sort and
    validate_max_concurrency_and_draft_len_schedule_mutually_exclusive.
  tensorrt_llm/_torch/speculative/utils.py, get_draft_len_for_batch_size ("New semantics").
"""
import bisect

import numpy as np
import pytest

from src.online import trtllm_snippet as ts
from src.online.policies import BatchSchedule
from tests.helpers import run_captured

# public fields of DecodingBaseConfig (llm_args.py at 0004396)
BASE_FIELDS = {"max_draft_len", "max_total_draft_tokens", "speculative_model",
               "speculative_model_dir",  # validation alias of speculative_model
               "max_concurrency", "draft_len_schedule", "load_format",
               "acceptance_rate_window_size", "acceptance_rate_threshold",
               "use_rejection_sampling", "allow_advanced_sampling", "advanced_sampling_mode",
               "enable_penalty"}
EAGLE_FIELDS = {"decoding_type", "eagle_choices", "greedy_sampling", "posterior_threshold",
                "use_dynamic_tree", "dynamic_tree_max_topK", "num_eagle_layers",
                "max_non_leaves_per_layer", "eagle3_one_model", "eagle3_layers_to_capture",
                "eagle3_model_arch"}
FIELDS = {  # decoding_type literal -> the class's user-settable fields
    "Eagle3": BASE_FIELDS | EAGLE_FIELDS | {"sa_config"},
    "NGram": BASE_FIELDS | {"decoding_type", "max_matching_ngram_size", "is_keep_all",
                            "is_use_oldest", "is_public_pool"},
    "Draft_Target": BASE_FIELDS | {"decoding_type"},
    "MTP": BASE_FIELDS | {"decoding_type", "use_relaxed_acceptance_for_thinking", "relaxed_topk",
                          "relaxed_delta", "use_mtp_vanilla", "mtp_eagle_one_model",
                          "use_dynamic_tree", "dynamic_tree_max_topK", "sa_config",
                          "begin_thinking_phase_token", "end_thinking_phase_token"},
}
CUDA_GRAPH_FIELDS = {"batch_sizes", "max_batch_size", "enable_padding"}


def trtllm_validate(spec: dict) -> None:
    """TensorRT-LLM's checks of a speculative_config (copied, llm_args.py at 0004396)."""
    t = spec["decoding_type"]
    extra = set(spec) - FIELDS[t]
    assert not extra, f"not fields of {t}: {extra}"  # StrictBaseModel: extra fields forbidden
    k = spec.get("max_draft_len")
    if t in ("Eagle3", "NGram", "Draft_Target"):
        assert k is not None and k > 0, f"max_draft_len must be > 0 for {t}"
    if t == "MTP" and k is not None:
        assert k > 0
    if t in ("Eagle3", "Draft_Target"):
        assert spec.get("speculative_model"), "a draft model must be provided"
    sched = spec.get("draft_len_schedule")
    assert not (sched is not None and spec.get("max_concurrency") is not None), \
        "max_concurrency and draft_len_schedule are mutually exclusive"
    if spec.get("max_concurrency") is not None:
        assert spec["max_concurrency"] >= 1  # PositiveInt
    if sched is not None:
        for b, d in sched.items():
            assert isinstance(b, int) and b >= 1, "batch size threshold must be >= 1"
            assert isinstance(d, int) and d >= 0, "draft length must be >= 0"
        assert sched[min(sched)] == k, "the smallest key must map to max_draft_len"
        assert all(d <= k for d in sched.values()), "all draft lengths must be <= max_draft_len"


def get_draft_len_for_batch_size(schedule, batch_size, max_draft_len):
    """Copied from tensorrt_llm/_torch/speculative/utils.py (bisect_left: the first key >= B)."""
    if schedule is None:
        return max_draft_len
    keys = sorted(schedule)
    idx = bisect.bisect_left(keys, batch_size)
    if idx < len(keys):
        return schedule[keys[idx]]
    return 0


def tiny_yaml(lines: list[str]) -> dict:
    """A parser of the block-mapping subset the snippet emits (key: scalar, nesting by indent)."""
    root: dict = {}
    stack = [(-1, root)]
    for line in lines:
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        key = int(key) if key.isdigit() else key
        value = value.strip()
        if not value:
            stack[-1][1][key] = child = {}
            stack.append((indent, child))
        else:
            stack[-1][1][key] = (int(value) if value.lstrip("-").isdigit()
                                 else {"true": True, "false": False}.get(value, value.strip('"')))
    return root


SCHEDULES = [
    [[1, 16, 4], [17, 64, 2], [65, 1024, 1]],  # falling
    [[1, 32, 3], [33, 1024, 0]],  # one on-range, then off: max_concurrency
    [[1, 1024, 2]],  # one length everywhere
    [[1, 8, 2], [9, 40, 3], [41, 200, 1], [201, 1024, 0]],  # a rise (capped), then off
    [[1, 4, 5], [5, 9, 0], [10, 30, 2], [31, 1024, 0]],  # off in between
]


@pytest.mark.parametrize("ranges", SCHEDULES)
@pytest.mark.parametrize("draft", ["ngram", "llama-3.2-1b", "mtp"])
def test_the_schedule_passes_the_validator_and_reads_back_as_the_projects(ranges, draft):
    spec, capped = ts.speculative_config(draft, ranges, None)
    trtllm_validate(spec)
    top = ranges[0][2]
    project = BatchSchedule(tuple(tuple(r) for r in ranges), top).lookup(1024)
    sched = spec.get("draft_len_schedule")
    if "max_concurrency" in spec:
        sched = {spec["max_concurrency"]: top}  # the translation llm_args.py makes of it
    for b in range(1, 1025):
        assert get_draft_len_for_batch_size(sched, b, top) == min(project[b], top), b
    assert capped == any(k > top for _, _, k in ranges)


def test_keys_are_those_of_the_config_classes_and_the_yaml_parses():
    yaml = pytest.importorskip("yaml")  # PyYAML: in the dev venv, not in requirements.txt
    for draft, decoding_type in (("ngram", "NGram"), ("llama-3.2-1b", "Draft_Target"),
                                 ("mtp", "MTP"), ("eagle3", "Eagle3"),
                                 ("gpt-oss-20b-eagle3", "Eagle3")):
        options, _ = ts.extra_options(draft, SCHEDULES[0], "some/head")
        text = "\n".join(ts.to_yaml(options))
        assert yaml.safe_load(text) == options == tiny_yaml(text.splitlines())
        assert options["speculative_config"]["decoding_type"] == decoding_type
        trtllm_validate(options["speculative_config"])
        assert set(options) == {"speculative_config", "cuda_graph_config"}
        assert set(options["cuda_graph_config"]) <= CUDA_GRAPH_FIELDS
    # this version has no acceptance_window / acceptance_length_threshold: the snippet emits none
    assert not {"acceptance_window", "acceptance_length_threshold"} & BASE_FIELDS


def test_recommend_prints_a_yaml_that_loads(capsys):
    done = run_captured(["recommend", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft",
                         "ngram", "--acceptance", "0.5", "--engine", "trtllm", "--batch",
                         "1,64"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("  cat > spec.yaml <<'EOF'")
    end = lines.index("  EOF", start)
    options = tiny_yaml([line[2:] for line in lines[start + 1:end]])
    trtllm_validate(options["speculative_config"])
    assert options["speculative_config"]["decoding_type"] == "NGram"
    serve = lines[end + 1].split()
    assert serve[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-8B"]
    assert serve[serve.index("--tp_size") + 1] == "1"
    assert serve[serve.index("--extra_llm_api_options") + 1] == "spec.yaml"


def test_an_eagle_1_head_is_refused_in_one_line():
    done = run_captured(["recommend", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft",
                         "eagle", "--acceptance", "0.5", "--engine", "trtllm"])
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --draft: TensorRT-LLM's PyTorch "
                                                   "backend has no 'eagle' drafting"), lines


def test_serve_and_plan_take_the_profile(tmp_path):
    from src.plan.config import build_plan
    plan = build_plan({"gpus": "h200", "pairs": "llama-3.1-8b+llama-3.2-1b",
                       "engines": "trtllm", "policies": "fixed:3", "workloads": "alpaca",
                       "slo": "ttft=2s,tpot=15ms"}, None)
    assert plan.engines == ("trtllm",)
    out = tmp_path / "out"
    done = run_captured(["serve", "--scenario", "configs/scenarios/h100-llama8b-1b.toml",
                         "--engine", "trtllm", "--rates", "1", "--requests", "20",
                         "--replications", "2", "--policies", "none,fixed:2", "--no-plots",
                         "--quiet", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    import pandas as pd
    table = pd.read_csv(out / "results" / "serving.csv")
    assert set(table.engine_profile) == {"trtllm"}
    assert np.isfinite(table.tpot_p50_s).all()
