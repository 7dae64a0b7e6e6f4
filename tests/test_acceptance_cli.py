"""run.py with measured acceptance: --acceptance-from-vllm, --acceptance-length, --acceptance-trace,
and the EAGLE scenario's per-position mode. Small grids; the numbers are checked elsewhere."""
import os

import numpy as np
import pandas as pd
import pytest

import run
from tests.test_acceptance_traces import simulate_trace
from tests.test_vllm_metrics import MODEL, accepted_lengths, vllm_metrics_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fast_study.toml")
SMALL = ["--batch-sizes", "1,8", "--gammas", "1,2,4,6", "--serving-modes", "continuous_refill",
         "--quiet", "--no-plots", "--scenario", "reference", "--config", FAST]


@pytest.fixture(scope="module")
def metrics_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics")
    rng = np.random.default_rng(5)
    early = accepted_lengths(rng, (0.8, 0.7, 0.6, 0.5), 20_000)
    window = accepted_lengths(rng, (0.8, 0.7, 0.6, 0.5), 40_000)
    (d / "before.txt").write_text(vllm_metrics_text({(MODEL, "0"): early}, 4))
    (d / "after.txt").write_text(vllm_metrics_text({(MODEL, "0"): np.concatenate([early, window])},
                                                   4))
    return d


def test_vllm_metrics_run_the_study_with_the_derived_modes(tmp_path, capsys, metrics_files):
    before, after = metrics_files / "before.txt", metrics_files / "after.txt"
    code = run.main(["--acceptance-from-vllm", f"{before},{after}", "--out", str(tmp_path)] + SMALL)
    assert code == 0
    printed = capsys.readouterr().out
    assert "drafts 40000" in printed and "per-position conditional rates a_i: a1=0.80" in printed
    assert "quality modes run: vllm_per_position, vllm_iid" in printed
    df = pd.read_csv(tmp_path / "results" / "results.csv")
    assert set(df.quality_mode) == {"vllm_per_position", "vllm_iid"}
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert "6. Per-position vs i.i.d. acceptance" in summary
    assert "vllm_per_position (per-position) vs vllm_iid (i.i.d.)" in summary
    assert "source: vLLM metrics" in summary


def test_acceptance_length_runs_its_iid_rate(tmp_path, capsys):
    code = run.main(["--acceptance-length", "2.6", "--gamma-measured", "3", "--out", str(tmp_path)]
                    + SMALL)
    assert code == 0
    # 1 + a + a^2 + a^3 = 2.6
    assert "i.i.d. per-token rate alpha = 0.7171" in capsys.readouterr().out
    df = pd.read_csv(tmp_path / "results" / "results.csv")
    assert set(df.quality_mode) == {"tau2.6_k3"}


def test_trace_runs_with_its_iid_fit(tmp_path, capsys):
    rng = np.random.default_rng(6)
    trace = tmp_path / "trace.csv"
    trace.write_text(simulate_trace(rng, (0.9, 0.75, 0.6, 0.5),
                                    np.exp(0.4 * rng.standard_normal(60)), 40,
                                    lambda g, n: np.full(n, 4)))
    out = tmp_path / "out"
    assert run.main(["--acceptance-trace", str(trace), "--out", str(out)] + SMALL) == 0
    assert "60 requests, 2400 steps" in capsys.readouterr().out
    summary = (out / "results" / "summary.txt").read_text()
    assert "trace_per_position (per-position) vs trace_iid (i.i.d.)" in summary


def test_eagle_scenario_says_how_per_position_changes_gamma_and_speedup(tmp_path):
    # the scenario with the two modes H7 compares, not its third (eagle_mixed: a third of the
    # run and of the plots' panels), and one engine profile (what H7 says does not depend on it);
    # --quality-modes names only the study's own modes
    with open(os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml")) as f:
        text = f.read()
    modes = 'quality_modes = ["eagle_mtbench", "eagle_mixed", "eagle_mtbench_per_position"]'
    assert modes in text
    path = tmp_path / "h100-llama8b-eagle.toml"
    profiles = 'engine_profiles = ["ideal", "vllm-v1"]'  # one profile: half the runs and panels
    assert profiles in text
    path.write_text(text.replace(modes, modes.replace(' "eagle_mixed",', ""))
                    .replace(profiles, 'engine_profiles = ["ideal"]'))
    code = run.main(["--scenario", str(path), "--batch-sizes", "1,16", "--gammas", "2,4,6",
                     "--quiet", "--config", FAST, "--out", str(tmp_path / "out")])
    assert code == 0
    summary = (tmp_path / "out" / "results" / "summary.txt").read_text()
    assert "H7. Per-position vs i.i.d. acceptance" in summary
    assert "eagle_mtbench_per_position (per-position) vs eagle_mtbench (i.i.d.)" in summary
    assert "0.79, 0.74, 0.72, 0.73, 0.67" in summary
    # the plots draw per-position modes too (the other runs here skip plots)
    assert len(list((tmp_path / "out" / "plots").glob("hardware_*.png"))) == 4


@pytest.mark.parametrize("argv,needle", [
    (["--acceptance-from-vllm", "{after},{before}"], "decreased from"),
    (["--acceptance-from-vllm", "{nospec}"], "no speculative-decoding counters"),
    (["--acceptance-from-vllm", "{rising}"], "expected counts that never rise with position"),
    (["--acceptance-from-vllm", "{after}", "--model-name", "other"],
     "--model-name: no speculative-decoding"),
    (["--model-name", "x"], "--model-name: only applies with --acceptance-from-vllm"),
    (["--acceptance-length", "4.5", "--gamma-measured", "3"],
     "--acceptance-length: mean acceptance length"),
    (["--acceptance-length", "2.5"], "--gamma-measured: required"),
    (["--acceptance-trace", "{empty}"], "--acceptance-trace: "),
    (["--acceptance-trace", "{badtrace}"], "expected an integer >= 0"),
], ids=["decreasing", "no-counters", "rising", "model-name", "model-name-alone", "tau-range",
        "no-k",
        "empty-trace", "bad-trace"])
def test_bad_measured_acceptance_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys,
                                                                       metrics_files,
                                                                       argv, needle):
    files = {"before": metrics_files / "before.txt", "after": metrics_files / "after.txt"}
    files["nospec"] = tmp_path / "nospec.txt"
    files["nospec"].write_text('# TYPE vllm:num_requests_running '
                               'gauge\nvllm:num_requests_running{engine="0"} 1\n')
    files["rising"] = tmp_path / "rising.txt"
    files["rising"].write_text(files["after"].read_text().replace(
        'position="3"}', 'position="9"}').replace('position="2"}', 'position="3"}').replace(
        'position="9"}', 'position="2"}'))  # swap the two deepest positions
    files["empty"] = tmp_path / "empty.csv"
    files["empty"].write_text("")
    files["badtrace"] = tmp_path / "bad.csv"
    files["badtrace"].write_text("request_id,step,proposed,accepted\na,0,3,-1\n")
    out = tmp_path / "out"
    code = run.main([a.format(**files) for a in argv] + ["--out", str(out)] + SMALL)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: ")
    assert needle in captured.err
    assert captured.out == "" and not out.exists()


def test_serve_runs_a_per_position_mode_and_says_so(tmp_path):
    """serve runs the EAGLE scenario's per-position mode with its per-position law (not its
    geometric-mean rate as i.i.d.): the summary names the mode, says it is per-position with its
    rates (the default gamma's closed form: tests/test_online_policies.py)."""
    path = os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml")
    out = tmp_path / "out"
    argv = ["serve", "--scenario", path, "--quality-mode", "eagle_mtbench_per_position",
            "--rates", "2,16", "--requests", "24", "--replications", "2",
            "--policies", "none,fixed,adaptive", "--no-plots", "--workers", "1", "--quiet",
            "--out", str(out)]
    assert run.main(argv) == 0
    df = pd.read_csv(out / "results" / "serving.csv")
    assert set(df.quality_mode) == {"eagle_mtbench_per_position"}
    assert (df[df.policy != "none"].acceptance_rate > 0).all()
    summary = (out / "results" / "summary.txt").read_text()
    assert ("acceptance mode eagle_mtbench_per_position (per-position: conditional rates "
            "a1..a5 = 0.79, 0.74, 0.72, 0.73, 0.67") in summary


def test_serve_refuses_a_per_position_mode_over_a_traces_iid_alphas(tmp_path, capsys):
    """A trace's alpha column holds i.i.d. per-token rates that would replace the mode's: with a
    per-position mode that is one line naming --quality-mode, exit 2, nothing written."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,alpha\n0,100,20,0.6\n1,120,30,0.7\n")
    path = os.path.join(ROOT, "configs", "scenarios", "h100-llama8b-eagle.toml")
    out = tmp_path / "out"
    code = run.main(["serve", "--scenario", path, "--quality-mode", "eagle_mtbench_per_position",
                     "--trace", str(trace), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: --quality-mode")
    # an explicit mode is ignored under any trace alpha column (per-position or not)
    assert "the trace's alpha column gives each request's acceptance" in err
    assert not out.exists()
