"""`recommend --engine all` (the default without --rate; src/online/recommend_all.py): the vLLM,
SGLang and TensorRT-LLM answers for one deployment side by side, each naming its version, each
snippet passing its engine's rules (the checkers of the per-engine tests, copies of the engines'
source), issue 24 section 6 on every engine's schedule, a refusing engine in one line; and serve's
line where a policy drafts past an MTP checkpoint's depth."""
import json
import re

import pytest

from src.online.recommend_all import ENGINES
from tests.helpers import run_captured
from tests.test_online_recommend import check_vllm_shape, sglang_resolved, vllm_config
from tests.test_sglang_adaptive import _sglang_accepts
from tests.test_trtllm_snippet import tiny_yaml, trtllm_validate

NGRAM = ["recommend", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft", "ngram",
         "--acceptance", "0.5"]  # issue 24's example of a schedule a user cannot explain
NAMES = ("vLLM", "SGLang", "TensorRT-LLM")


@pytest.fixture(scope="module")
def ngram_out() -> str:
    done = run_captured(NGRAM)  # no --engine: all three
    assert done.returncode == 0, done.stderr
    return done.stdout


def section(out: str, name: str) -> list[str]:
    """The lines of one engine's section (from its === header to the next blank-line-then-===
    or the Assumptions)."""
    lines = out.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"=== {name} (engine profile"))
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith(("=== ", "Assumptions:"))), len(lines))
    return lines[start:end]


def schedule_of(lines: list[str]) -> list[tuple[int, int, int]]:
    """[low, high, K] of a section's 'Schedule (batch range -> K):' line."""
    text = next(x for x in lines if x.startswith("Schedule (batch range -> K): "))
    out = []
    for item in text.split(": ", 1)[1].split(", "):
        span, k = item.split(" ")
        lo, hi = map(int, span.split("-"))
        out.append((lo, hi, 0 if k == "off" else int(k[1:])))
    return out


def test_every_engine_names_the_version_its_answer_is_for(ngram_out):
    for profile, name, version in ENGINES:
        head = section(ngram_out, name)[0]
        assert head == f"=== {name} (engine profile {profile}; for {version}) ==="
    assert "v0.5.10.post1" in ngram_out and "015c8726" in ngram_out  # SGLang
    assert "TensorRT-LLM main at commit 0004396" in ngram_out  # llm_args.py as read
    assert "vLLM at commit 09f030ea" in ngram_out and "vLLM 0.24.0" in ngram_out


def test_each_snippet_passes_its_engines_rules(ngram_out):
    yaml = pytest.importorskip("yaml")  # PyYAML: in the dev venv, not in requirements.txt
    vllm = "\n".join(section(ngram_out, "vLLM"))
    cfg = vllm_config(vllm)
    check_vllm_shape(cfg)
    assert [tuple(r) for r in cfg["num_speculative_tokens_per_batch_size"]] == \
        schedule_of(section(ngram_out, "vLLM"))
    sglang = "\n".join(section(ngram_out, "SGLang"))
    flags = re.search(r"launch_server --model-path \S+ (.*)", sglang).group(1)
    k_sglang = schedule_of(section(ngram_out, "SGLang"))[0][2]
    assert sglang_resolved(flags) == {"breadth": 1, "drafts": k_sglang}
    trt = section(ngram_out, "TensorRT-LLM")
    start = trt.index("  cat > spec.yaml <<'EOF'")
    body = [x[2:] for x in trt[start + 1:trt.index("  EOF", start)]]
    options = yaml.safe_load("\n".join(body))
    assert options == tiny_yaml(body)
    trtllm_validate(options["speculative_config"])
    assert options["speculative_config"]["max_draft_len"] == \
        schedule_of(trt)[0][2]


def test_each_engines_schedule_is_one_a_user_can_trust(ngram_out):
    """Issue 24 section 6: at most 6 ranges, and gamma does not rise with batch size (none of
    the three rises here: a rise would carry its one-line reason, 'gamma rises from')."""
    for name in NAMES:
        ranges = schedule_of(section(ngram_out, name))
        assert 1 <= len(ranges) <= 6, (name, ranges)
        assert ranges[0][0] == 1 and all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:]))
        ks = [k for *_, k in ranges]
        assert ks == sorted(ks, reverse=True), (name, ranges)
    assert "gamma rises from" not in ngram_out


def test_the_side_by_side_tables_hold_each_engines_own_schedule(ngram_out):
    lines = ngram_out.splitlines()
    i = next(n for n, x in enumerate(lines) if x.startswith("Side by side:"))
    assert lines[i + 1].split() == ["batch", *NAMES]
    schedules = {name: schedule_of(section(ngram_out, name)) for name in NAMES}
    rows = []
    for row in lines[i + 2:]:
        if not row.strip():
            break
        rows.append(row.split())
    for row in rows:
        lo = int(row[0].split("-")[0])
        cells = re.findall(r"(off|K\d+ \S+)", " ".join(row[1:]))
        assert len(cells) == 3, row
        for name, cell in zip(NAMES, cells):
            k = next(k for a, b, k in schedules[name] if a <= lo <= b)
            assert cell == "off" if k == 0 else cell.startswith(f"K{k} "), (name, row)
    # one engine's answer in the table is the single-engine answer: the same schedule
    single = run_captured([*NGRAM, "--engine", "sglang"])
    assert single.returncode == 0, single.stderr
    assert vllm_config(single.stdout)["num_speculative_tokens_per_batch_size"] == \
        [list(r) for r in schedules["SGLang"]]


def test_an_engine_that_refuses_the_draft_gets_one_line():
    """TensorRT-LLM's PyTorch backend takes no EAGLE-1 head: one line, no YAML; vLLM and SGLang
    (whose adaptive config loads by SGLang's rules) still answer."""
    done = run_captured(["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft",
                         "eagle", "--draft-model-path", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                         "--acceptance", "0.7", "--batch", "1,16"])
    assert done.returncode == 0, done.stderr
    trt = [x for x in section(done.stdout, "TensorRT-LLM") if x.strip()]
    assert len(trt) == 1 and "not printed, refused: --draft:" in trt[0] and "EAGLE-3" in trt[0]
    assert "spec.yaml" not in done.stdout and "trtllm-serve" not in done.stdout
    assert "  TensorRT-LLM (trtllm): refused" in done.stdout
    check_vllm_shape(vllm_config("\n".join(section(done.stdout, "vLLM"))))
    out = section(done.stdout, "SGLang")
    i = next(n for n, x in enumerate(out) if x.startswith("SGLang adaptive speculation"))
    assert _sglang_accepts(json.loads(out[i + 2]))
    lines = done.stdout.splitlines()
    i = next(n for n, x in enumerate(lines) if x.startswith("Side by side:"))
    assert lines[i + 1].split() == ["batch", "vLLM", "SGLang"]


def test_where_every_engine_refuses_it_is_one_line_exit_2():
    done = run_captured([*NGRAM[:2], "nope", *NGRAM[3:]])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: --gpu")


def test_all_with_rate_is_refused_in_one_line():
    done = run_captured([*NGRAM, "--engine", "all", "--rate", "1"])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: --engine: 'all' prices every engine in the steady "
                                  "state") and done.stderr.count("\n") == 1


def _serve_cfg(policies: str, max_gamma: str = "8"):
    from src.online.cli import config_from_args, make_parser
    return config_from_args(make_parser().parse_args(
        ["--scenario", "configs/scenarios/moe-deepseek-v3-mtp-8xh200.toml", "--policies",
         policies, "--max-gamma", max_gamma, "--rates", "1"]))


def test_serve_says_where_a_policy_drafts_past_the_mtp_depth():
    """DeepSeek-V3 ships one MTP layer: fixed:4 and adaptive (up to --max-gamma) draft past it,
    fixed:1 and a schedule topping at 1 do not."""
    from src.acceptance import MTP_REUSE_DECAY
    from src.online.mtp_depth import PER_POSITION_METRIC, reuse_line, serve_notes
    from src.online.policies import BatchSchedule, parse_policies
    cfg = _serve_cfg("none,fixed:1,fixed:4,adaptive", "6")
    within = BatchSchedule(((1, 16, 1), (17, 1024, 0)), 1)
    policies = parse_policies(cfg.policies, 1, cfg.max_gamma, within)
    (line,) = serve_notes(cfg, policies)
    assert line.startswith("MTP depth: policies fixed:4 (K 4), adaptive (K 6) pass the "
                           "checkpoint's 1 MTP layer (num_nextn_predict_layers 1)")
    assert "reuse it for drafts 2-6" in line and f"x{MTP_REUSE_DECAY:g}" in line
    assert PER_POSITION_METRIC in line and f"'{cfg.alpha_mode}'" in line
    # recommend's line is the same sentence (mtp_depth.reuse_line) with its own subject
    shared = reuse_line(1, 6, "X", "Y", "pass").split("X", 1)[1].split("Y")[0]
    assert shared == " pass the checkpoint's 1 MTP layer (num_nextn_predict_layers 1): vLLM " \
                     "and SGLang reuse it for drafts 2-6, whose acceptance " and shared in line
    cfg = _serve_cfg("none,fixed:1,schedule")
    assert serve_notes(cfg, parse_policies(cfg.policies, 1, cfg.max_gamma, within)) == []


def test_vllm_refusing_an_mtp_depth_it_cannot_reuse_leaves_the_other_two(tmp_path):
    """A 3-layer MTP checkpoint at an explicit --max-gamma 4: vLLM takes K <= 3 or a multiple of
    3 (vllm/config/speculative.py), SGLang and TensorRT-LLM reuse the layers at any depth."""
    from tests.test_mtp_depth import deepseek_config
    done = run_captured(["recommend", "--gpu", "h200", "--target", deepseek_config(tmp_path, 3),
                         "--draft", "mtp", "--tp", "8", "--acceptance", "0.875", "--batch", "1",
                         "--max-gamma", "4"])
    assert done.returncode == 0, done.stderr
    vllm = [x for x in section(done.stdout, "vLLM") if x.strip()]
    assert len(vllm) == 1 and "refused: --max-gamma:" in vllm[0]
    assert "allowed: 1..3 or a multiple of 3" in vllm[0] and "vllm serve" not in done.stdout
    assert "launch_server" in done.stdout and "decoding_type: MTP" in done.stdout
