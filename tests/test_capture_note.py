"""recommend's CUDA-graph line (src/online/capture_note.py): the capture size the printed vLLM
schedule needs, whether vLLM's default covers it, a flag vLLM's own parser takes, and
--max-cudagraph-capture-size's one-line errors."""
import argparse
import json
import re
import shlex

from src.costmodel.cudagraph_sizes import vllm_max_capture_size
from src.online.capture_note import first_eager_batch, widest_step
from tests.helpers import run_captured

# --batch 1: the CUDA-graph line follows the schedule (every batch size up to --max-num-seqs),
# which --batch does not change (the same lines with and without it); it shrinks only the batch
# table and the tree section, most of a default recommend's time
BASE = ["recommend", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
        "--acceptance", "0.7", "--batch", "1"]


def vllm_parser() -> argparse.ArgumentParser:
    """The shape of vLLM's two flags (vllm/engine/arg_utils.py at vllm-project/vllm
    09f030eaf851400a83ad3d99f730868f76df0ca7): compilation_group.add_argument(
    "--max-cudagraph-capture-size", **compilation_kwargs["max_cudagraph_capture_size"]), the
    kwargs of an `int | None` field of CompilationConfig (type int), and vllm_group.add_argument(
    "--compilation-config", "-cc", ...), JSON whose keys are CompilationConfig's fields
    (vllm/config/compilation.py: max_cudagraph_capture_size: int | None, cudagraph_capture_sizes:
    list[int] | None, among others; extra="forbid")."""
    p = argparse.ArgumentParser(exit_on_error=False)
    p.add_argument("--max-cudagraph-capture-size", type=int)
    p.add_argument("--compilation-config", "-cc", type=json.loads)
    return p


COMPILATION_CONFIG_CAPTURE_FIELDS = {"max_cudagraph_capture_size": int,
                                     "cudagraph_capture_sizes": list}


def test_the_widest_step_and_the_first_eager_batch():
    ranges = [(1, 170, 2), (171, 1024, 1)]
    assert widest_step(ranges, 1024, 2) == (2048, 1024, 1)
    assert widest_step(ranges, 1024, 2, speculative_only=True) == (2048, 1024, 1)
    assert widest_step([(1, 8, 3), (9, 1024, 0)], 1024, 3, True) == (32, 8, 3)
    assert widest_step(ranges, 128, 2) == (384, 128, 2)  # capped at max_num_seqs
    assert first_eager_batch(ranges, 1024, 2, 512) == (257, 1)  # 257 x 2 = 514 > 512
    assert first_eager_batch([(1, 200, 3)], 1024, 3, 512) == (129, 3)
    assert first_eager_batch(ranges, 128, 2, 512) is None


def test_recommend_states_the_size_its_schedule_needs_and_a_flag_vllm_parses():
    done = run_captured(BASE)
    assert done.returncode == 0, done.stderr
    config = json.loads(re.search(r"--speculative-config '(\{.*\})'", done.stdout).group(1))
    ranges, k = config["num_speculative_tokens_per_batch_size"], config["num_speculative_tokens"]
    need = max(min(hi, 1024) * (min(g, k) + 1) for lo, hi, g in ranges)
    line = re.search(r"CUDA graphs \(vLLM at commit 09f030ea.*", done.stdout).group(0)
    assert f"= {need} tokens" in line
    assert f"= {vllm_max_capture_size(1024, k, 8192)} tokens by default" in line
    assert "run without CUDA graphs" in line  # 1024 requests need more than 512 tokens
    advice = re.search(r"To capture them add (--max-cudagraph-capture-size \d+) \(or "
                       r"--compilation-config '(\{.*?\})'\)", done.stdout)
    assert advice, done.stdout
    args = vllm_parser().parse_args(shlex.split(advice.group(1)))
    assert args.max_cudagraph_capture_size >= need
    assert vllm_max_capture_size(1024, k, 8192, args.max_cudagraph_capture_size) >= need
    cc = vllm_parser().parse_args(["-cc", advice.group(2)]).compilation_config
    assert set(cc) <= set(COMPILATION_CONFIG_CAPTURE_FIELDS)
    assert cc["max_cudagraph_capture_size"] == args.max_cudagraph_capture_size


def test_a_default_that_covers_the_schedule_says_so():
    done = run_captured([*BASE, "--max-num-seqs", "128"])
    assert done.returncode == 0, done.stderr
    assert "which covers it." in done.stdout
    assert "To capture them" not in done.stdout


def test_the_flag_is_resolved_onto_vllms_grid():
    done = run_captured([*BASE, "--max-cudagraph-capture-size", "1000"])
    assert done.returncode == 0, done.stderr
    assert "992 with --max-cudagraph-capture-size 1000" in done.stdout


def test_bad_capture_sizes_are_one_line_errors():
    for value, words in (("x", "is not an integer 1..1048576"), ("0", "is not an integer"),
                         ("\u0665\u0661\u0662", "is not an integer"),  # Arabic-Indic 512
                         ("1_024", "is not an integer"),
                         ("64", "have no token capture limit")):
        extra = ["--engine", "sglang"] if value == "64" else []
        done = run_captured([*BASE, *extra, "--max-cudagraph-capture-size", value])
        assert done.returncode == 2 and done.stdout == ""
        err = done.stderr
        assert err.count("\n") == 1 and "--max-cudagraph-capture-size" in err, err
        assert words in done.stderr
