"""`python run.py serve`: outputs, reproducibility, and one-line errors for bad input."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from src.config import ConfigError
from src.online.cli import parse_rates, parse_slo
from tests.helpers import run_captured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = [
    "--rates",
    "2,16",
    "--requests",
    "24",
    "--replications",
    "2",
    "--policies",
    "none,fixed:2,schedule,adaptive,off-above:8",
    "--workers",
    "1",
    "--quiet",
]


def run(*args):
    """`python run.py serve ARGS` in this process (the subprocess path is tested once, below)."""
    return run_captured(["serve", *args])


def test_serve_runs_as_a_command(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "run.py"), "serve", "--rates", "0"],
                       capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 2 and p.stderr.startswith("error: --rates")


def test_serve_writes_csv_summary_section_and_plots_reproducibly(tmp_path):
    out = tmp_path / "a"
    summary = out / "results" / "summary.txt"
    summary.parent.mkdir(parents=True)
    summary.write_text("THE STUDY'S SUMMARY\n")
    p = run(*QUICK, "--out", str(out))
    assert p.returncode == 0, p.stderr
    t = pd.read_csv(out / "results" / "serving.csv")
    assert sorted(t.rate_per_s.unique()) == [2, 16]
    assert list(dict.fromkeys(t.policy)) == [
        "none",
        "fixed:2",
        "schedule",
        "adaptive",
        "off-above:8",
    ]
    for col in (
        "ttft_p99_s",
        "tpot_p50_s_ci_low",
        "itl_p90_s",
        "e2e_p50_s",
        "goodput_req_s",
        "output_throughput_tok_s",
        "request_throughput_req_s",
        "mean_batch",
        "kv_use",
        "tpot_p50_speedup",
        "output_throughput_tok_s_gain",
        "gain_over_best_fixed",
    ):
        assert t[col].notna().all(), col
    assert (t[t.policy == "none"].tpot_p50_speedup == 1).all()
    text = summary.read_text()
    assert text.startswith("THE STUDY'S SUMMARY") and "SERVING UNDER LOAD" in text
    for name in ("serving_latency_vs_rate", "serving_throughput_latency", "serving_goodput"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 10_000
    # a second run replaces the section (not appends) and gives byte-identical results; with
    # --no-plots the first run's plots go (they would show another run's numbers)
    csv = (out / "results" / "serving.csv").read_bytes()
    p = run(*QUICK, "--no-plots", "--out", str(out))
    assert p.returncode == 0
    assert summary.read_text() == text
    assert (out / "results" / "serving.csv").read_bytes() == csv
    assert text.count("SERVING UNDER LOAD (") == 1
    assert not (out / "plots").exists()


@pytest.mark.parametrize(
    "args, field",
    [
        (["--rates", "0,2"], "--rates"),
        (["--rates", "-1"], "--rates"),
        (["--rates", "x"], "--rates"),
        (["--rates", "1,,2"], "--rates: '1,,2' has an empty item"),  # as the study's lists
        (["--rates", "1,2,"], "--rates: '1,2,' has an empty item"),
        (["--policies", "none,,fixed:2"], "--policies: 'none,,fixed:2' has an empty item"),
        (["--policies", "none,magic"], "--policies"),
        (["--policies", "fixed:0"], "--policies"),
        (["--workload", "nosuch"], "--workload"),
        (["--slo", "ttft=2"], "--slo"),
        (["--slo", "ttft=fast,tpot=50ms"], "--slo"),
        (["--slo", "ttft=2s,tpot=50"], "--slo"),  # a bare number: no unit, refused
        (["--arrival", "gamma:-1"], "--arrival"),
        (["--requests", "0"], "--requests"),
        (["--max-num-seqs", "64", "--max-num-batched-tokens", "32"], "--max-num-batched-tokens"),
        (["--schedule", "[[2, 8, 3]]"], "--schedule"),
        (["--alpha", "1.5"], "--alpha"),
        # options the run would ignore
        (["--schedule", "[[1,15,3],[16,1024,0]]", "--policies", "none,fixed"],
         "--schedule: the schedule policy does not run (--policies none,fixed), so --schedule "
         "would be ignored"),
        (["--policies", "none", "--max-gamma", "4"],
         "--max-gamma: only the none policy runs (no draft), so --max-gamma would be ignored"),
        (["--policies", "none", "--alpha", "0.7"], "--alpha: only the none policy runs"),
        (["--policies", "none", "--quality-mode", "bimodal"], "--quality-mode: only the none"),
        (["--requests", "5", "--duration-s", "3"],
         "--requests: give either --requests or --duration-s, not both"),
        (["--alpha", "0.5", "--quality-mode", "bimodal"],
         "--alpha: give either --alpha or --quality-mode, not both"),
        (["--engine", "nosuch"], "--engine"),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, field):
    out = tmp_path / "o"
    p = run(*args, "--out", str(out))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), p.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--requests", "10"], "--requests: give either --requests or --trace, not both: the "
         "trace's 3 requests are replayed"),
        (["--duration-s", "5"], "--duration-s: give either --duration-s or --trace, not both"),
        (["--arrival", "poisson"], "--arrival: give either --arrival or --trace, not both: the "
         "trace's arrival times are replayed"),
        (["--workload", "sharegpt"], "--workload: give either --workload or --trace, not both"),
        (["--alpha", "0.7"], "--alpha: the trace's alpha column gives each request's "
         "acceptance, so --alpha would be ignored"),
        (["--quality-mode", "homogeneous_mid"], "--quality-mode: the trace's alpha column"),
    ],
)
def test_options_a_trace_replay_would_ignore_are_refused(tmp_path, args, needle):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,alpha\n0,100,20,0.6\n"
                     "0.5,120,30,0.7\n1,90,25,0.8\n")
    out = tmp_path / "o"
    p = run("--trace", str(trace), *args, "--out", str(out))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {needle}"), p
    assert not out.exists()


def test_scenario_keys_an_option_overrides_are_dropped_and_contradictory_ones_refused(tmp_path):
    """Options override the scenario's [serving] table: a key that an option makes moot is
    dropped (not refused); two keys of the file that contradict each other are refused."""
    from src.online.cli import config_from_args, make_parser

    scenario = os.path.join(ROOT, "configs", "scenarios", "check-vllm-blog-70b-draft.toml")
    trace = tmp_path / "t.csv"  # no alpha column: the quality mode is used
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.5,120,30\n")

    def cfg(*args, scenario=scenario):
        return config_from_args(make_parser().parse_args(["--scenario", str(scenario), *args]))

    c = cfg("--duration-s", "3")  # the file's requests = 300 gives way
    assert c.duration_s == 3 and c.requests_per_replication is None
    c = cfg("--trace", str(trace), "--quality-mode", "homogeneous_mid")  # file's requests, workload
    assert c.workload == "trace" and c.alpha_label == "homogeneous_mid" == c.alpha_mode
    assert c.arrival_label == "trace"
    with open(scenario) as fh:
        text = fh.read()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[serving]", "[serving]\nschedule = [[1, 15, 3], [16, 1024, 0]]"))
    p = run("--scenario", str(bad), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.startswith(
        "error: serving.schedule: the schedule policy does not run (serving.policies none,fixed:5)"
    ), p.stderr
    assert p.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
    # an option that would ignore the file's schedule overrides it: the key is dropped
    assert cfg("--policies", "none,fixed:3", scenario=bad).schedule_json is None


def test_malformed_trace_and_oversized_requests_are_refused(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.5,abc,20\n")
    p = run("--trace", str(bad), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "line 3: prompt_tokens 'abc'" in p.stderr
    missing = tmp_path / "missing.csv"
    missing.write_text("arrival_s,prompt_tokens\n0,100\n")
    p = run("--trace", str(missing), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "lacks column(s) output_tokens" in p.stderr
    huge = tmp_path / "huge.csv"
    huge.write_text("arrival_s,prompt_tokens,output_tokens\n0,900000,20\n1,100,20\n")
    p = run("--trace", str(huge), "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and "longest request" in p.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "rows, rates, needle",
    [
        # every arrival at one timestamp: no rate to replay, and rescaling keeps them at one
        (["0,100,20", "0,120,30", "0,90,10"], [], "--trace: all 3 arrivals share one timestamp"),
        (["5,100,20", "5,120,30"], ["--rates", "2,4"], "--trace: all 2 arrivals share one"),
        (["0,100,20"], [], "--trace: a trace of one request has no arrival rate to replay"),
        (["0,100,20"], ["--rates", "2"], "--trace: a trace of one request cannot be rescaled"),
    ],
)
def test_a_trace_without_an_arrival_rate_is_refused_not_given_one(tmp_path, rows, rates, needle):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows) + "\n")
    p = run("--trace", str(trace), *rates, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and p.stderr.startswith(f"error: {needle}"), p.stderr
    assert p.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_trace_replay_runs(tmp_path):
    trace = tmp_path / "t.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens,alpha"]
    rows += [f"{i * 0.25},{100 + 7 * i},{20 + i},0.6" for i in range(40)]
    trace.write_text("\n".join(rows) + "\n")
    p = run(
        "--trace",
        str(trace),
        "--policies",
        "none,fixed:2",
        "--replications",
        "2",
        "--workers",
        "1",
        "--quiet",
        "--no-plots",  # the plots are test_serve_writes_csv_summary_section_and_plots_...'s
        "--out",
        str(tmp_path / "o"),
    )
    assert p.returncode == 0, p.stderr
    t = pd.read_csv(tmp_path / "o" / "results" / "serving.csv")
    assert t.requests.tolist() == [80, 80] and t.rate_per_s.iloc[0] == pytest.approx(4.0)
    # labelled as what ran: the trace's arrival times and alphas, not poisson and a quality mode
    assert set(t.arrival) == {"trace"} and set(t.quality_mode) == {"trace"}
    summary = (tmp_path / "o" / "results" / "summary.txt").read_text()
    workload = next(line for line in summary.splitlines() if line.startswith("Workload:"))
    assert workload == ("Workload: trace (t.csv, 40 requests); arrivals from the trace; "
                        "acceptance from the trace's alpha column."), workload
    assert "poisson" not in summary


def test_value_parsers():
    assert parse_slo("--slo", "ttft=2s,tpot=50ms") == (2.0, 0.05)
    assert parse_slo("--slo", "tpot=0.04s,ttft=500ms") == (0.5, 0.04)
    assert parse_rates("--rates", "4,1,2") == (1.0, 2.0, 4.0)
    with pytest.raises(ConfigError, match="twice"):
        parse_rates("--rates", "1,1")
    with pytest.raises(ConfigError, match="empty item"):  # a [serving] rates list too
        parse_rates("serving.rates", [1, " ", 2])
    # a number without a unit was once read as seconds (tpot=50 -> 50 000 ms): refused instead
    with pytest.raises(ConfigError, match=r"tpot=50 has no unit; allowed: a number with s or ms, "
                                          r"e\.g\. tpot=50ms"):
        parse_slo("--slo", "ttft=2s,tpot=50")
    with pytest.raises(ConfigError, match=r"ttft=2 has no unit; .* e\.g\. ttft=2s"):
        parse_slo("--slo", "ttft=2,tpot=50ms")
    # a key given twice is named, not "does not parse"
    with pytest.raises(ConfigError,
                       match=r"^--slo: ttft given twice in 'ttft=2s,tpot=50ms,ttft=3s'"):
        parse_slo("--slo", "ttft=2s,tpot=50ms,ttft=3s")


def test_the_study_and_serve_keep_each_others_outputs(tmp_path, monkeypatch):
    """Each command replaces OUT/results and OUT/plots as one set; neither drops the other's files
    or summary section. Which files are kept is the point, not what they show: each plot is a
    stub PNG here (drawing the seven took about 3 s of CPU; the drawing is tested elsewhere)."""
    out = str(tmp_path)
    import run as run_py
    from src import analysis
    from src.online import report

    stub = b"\x89PNG\r\n\x1a\nstub"
    for name in ("plot_speedup_vs_batch", "plot_utilization_vs_batch", "plot_divergence_penalty",
                 "plot_gamma_batch_heatmap"):
        monkeypatch.setattr(analysis, name, lambda *args: None)
    monkeypatch.setattr(analysis, "png_bytes", lambda fig: stub)
    for name in list(report.SWEEP_PLOTS):
        monkeypatch.setitem(report.SWEEP_PLOTS, name, lambda t, cfg: stub)

    study = ["--scenario", "reference", "--batch-sizes", "1,2", "--gammas", "2",
             "--quality-modes", "homogeneous_good", "--serving-modes", "continuous_refill",
             "--quiet", "--out", out]
    assert run_py.main(study) == 0
    p = run("--rates", "4", "--requests", "20", "--replications", "2", "--policies",
            "none,fixed:2", "--workers", "1", "--quiet", "--out", out)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "results" / "results.csv").is_file()
    assert (tmp_path / "plots" / "speedup_vs_batch.png").is_file()
    after_serve = (tmp_path / "results" / "summary.txt").read_bytes()
    assert run_py.main(study + ["--no-plots"]) == 0
    # the study rerun in place writes the summary serve left, byte for byte (one joiner); without
    # plots it removes its own old ones and keeps serve's
    assert (tmp_path / "results" / "summary.txt").read_bytes() == after_serve
    assert after_serve.endswith(b"\n") and not after_serve.endswith(b"\n\n")
    assert b"\n\n\n" not in after_serve
    assert (tmp_path / "results" / "serving.csv").is_file()
    assert (tmp_path / "plots" / "serving_goodput.png").is_file()
    assert not (tmp_path / "plots" / "speedup_vs_batch.png").exists()
    text = (tmp_path / "results" / "summary.txt").read_text()
    assert text.count("SERVING UNDER LOAD (python run.py serve)") == 1
    assert text.index("SERVING UNDER LOAD") > 0  # after the study's own sections


def test_duration_sends_the_arrivals_of_that_window():
    from src.online.cli import config_from_args, make_parser
    from src.online.study import run_serving
    cfg = config_from_args(make_parser().parse_args(
        ["--duration-s", "20", "--rates", "3", "--policies", "none", "--replications", "2",
         "--arrival", "gamma:2"]))
    t = run_serving(cfg, workers=1)["table"]
    assert 60 <= t.requests.iloc[0] <= 200  # about 2 x 3/s x 20 s


def test_help_states_the_enforced_alpha_range_and_the_bare_fixed_gamma():
    from src.config import check_alpha
    from src.online.cli import make_parser

    text = " ".join(make_parser().format_help().split())
    assert "0.001..0.999" in text and "0 < A < 1" not in text
    with pytest.raises(ConfigError, match=r"0\.001\.\.0\.999"):  # what the help says is enforced
        check_alpha("--alpha", 0.9995)
    assert "A bare fixed (and off-above without G) uses the default gamma, the closed form's " \
           "best at batch 1" in text
    assert "none, fixed[:G], schedule, adaptive, off-above[:N[:G]]" in text
