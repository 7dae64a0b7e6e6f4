"""Numbers on the command line and in input files are ASCII digits only (issue 26): Python's
int() and float() read other scripts' digits ('٣' is 3), and '²' passes str.isdigit() and then
fails int() with a traceback. Each is refused in one line naming the flag, exit 2, nothing
written (src/errors.py ascii_int, ascii_float)."""
import pytest

from src import errors
from tests.helpers import run_captured

# each run is kept small, so that a value the old code read ('٣' as 3) ends in seconds
RUN = ["--scenario", "reference", "--config", "tests/fast_study.toml", "--batch-sizes", "1",
       "--gammas", "1", "--no-plots", "--quiet"]
SERVE = ["serve", "--scenario", "configs/scenarios/h100-llama8b-1b.toml", "--rates", "1",
         "--requests", "20", "--replications", "2", "--no-plots", "--quiet"]
PLAN = ["plan", "--gpus", "l4", "--pairs", "llama-3.1-8b+llama-3.2-1b", "--policies", "fixed:3",
        "--workloads", "alpaca", "--slo", "ttft=2s,tpot=15ms", "--duration-s", "10",
        "--start-rate", "1", "--target-rate", "2", "--quiet"]


@pytest.mark.parametrize("text", ["٣", "²", "1_0", "３", "1.5", "", " "])
def test_ascii_int_refuses_what_it_does_not_show(text):
    with pytest.raises(ValueError):
        errors.ascii_int(text)


@pytest.mark.parametrize("text", ["٣.5", "1_0", "３"])
def test_ascii_float_refuses_other_digits(text):
    with pytest.raises(ValueError):
        errors.ascii_float(text)


def test_ascii_readers_read_ascii_as_int_and_float_do():
    assert [errors.ascii_int(t) for t in (" 12 ", "-3", "+4", 7)] == [12, -3, 4, 7]
    assert [errors.ascii_float(t) for t in ("1e-3", " 2.5", "inf", 3)] == [
        1e-3, 2.5, float("inf"), 3.0]


CASES = [
    ([*RUN, "--trees", "3:2:²"], "--trees"),
    ([*RUN, "--trees", "٣:2:6"], "--trees"),
    ([*RUN, "--batch-sizes", "٢"], "--batch-sizes"),
    ([*RUN, "--gammas", "١"], "--gammas"),
    ([*RUN, "--seed", "٣"], "--seed"),
    ([*RUN, "--dask", "local:١"], "--dask"),
    ([*SERVE, "--rates", "٣"], "--rates"),
    ([*SERVE, "--policies", "fixed:٣"], "--policies"),
    ([*SERVE, "--policies", "tree:3:2:²"], "--policies"),
    ([*SERVE, "--policies", "off-above:٨:3"], "--policies"),
    ([*SERVE, "--seed", "٣"], "--seed"),
    ([*SERVE[:5], *SERVE[7:], "--duration-s", "٣٠"], "--duration-s"),  # not with --requests
    ([*SERVE, "--arrival", "gamma:٢"], "--arrival"),
    ([*SERVE, "--slo", "ttft=٢s,tpot=50ms"], "--slo"),
    ([*PLAN, "--target-rate", "٢"], "--target-rate"),
    ([*PLAN, "--max-gamma", "٣"], "--max-gamma"),
    ([*PLAN, "--prices", "l4=٣"], "--prices"),
    (["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
      "--acceptance", "0.7", "--tolerance", "٠.٠٢"], "--tolerance"),
    (["recommend", "--gpu", "h100-sxm", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b",
      "--acceptance", "٠.7"], "--acceptance"),
    (["step-time", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "1,٨"],
     "--batch"),
]


def _once(argv: list[str]) -> list[str]:
    """argv with a flag given twice kept at its last value only (the parsers refuse a repeat)."""
    out: list[str] = []
    for i in range(0, len(argv)):
        if argv[i].startswith("--") and argv[i] in argv[i + 1:]:
            continue
        if i and argv[i - 1].startswith("--") and argv[i - 1] in argv[i:] \
                and not argv[i].startswith("--"):
            continue
        out.append(argv[i])
    return out


@pytest.mark.parametrize("argv,flag", CASES, ids=[" ".join(c[0][-2:]) for c in CASES])
def test_non_ascii_digits_are_one_line_exit_2(argv, flag, tmp_path):
    out = tmp_path / "out"
    writes = argv[0] not in ("recommend", "step-time")  # these two print only
    argv = _once(argv)
    assert argv.count(flag) == 1
    done = run_captured([*argv, "--out", str(out)] if writes else argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_a_trace_csv_with_other_digits_is_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,٣٠\n", encoding="utf-8")
    done = run_captured([*SERVE, "--trace", str(trace), "--out", str(tmp_path / "out")])
    assert done.returncode == 2 and "--trace" in done.stderr and "line 2" in done.stderr, \
        done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_vllm_metrics_with_other_digits_are_refused():
    from src.acceptance_data.vllm_metrics import parse_counters
    from src.errors import ConfigError
    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{model_name="m"} ٣\n')
    with pytest.raises(ConfigError, match="not in ASCII digits"):
        parse_counters(text, "m.txt")
    text = ('# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="²"} 3\n')
    with pytest.raises(ConfigError, match="position"):
        parse_counters(text, "m.txt")


def test_a_preset_allreduce_key_in_other_digits_is_refused(tmp_path):
    from src.costmodel import CostModelInputError, load_presets
    extra = tmp_path / "p.toml"
    extra.write_text('[allreduce.h100-sxm."٢"]\nlatency_us = 10\nbus_bandwidth_gb_per_s = 300\n',
                     encoding="utf-8")
    with pytest.raises(CostModelInputError, match="allreduce.h100-sxm"):
        load_presets(extra_paths=[extra])
