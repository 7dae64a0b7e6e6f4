"""The whole pipeline: files, their contents, the summary's answers, determinism, subsets."""
import os
from dataclasses import replace

import pandas as pd
import pytest

import run
from src.config import StudyConfig
from src.costmodel import FlatCostModel
from src.hardware.scenario import default_hardware_scenario
from src.sweep import run_grid
from tests.helpers import GRID_KEYS, assert_rows_match, run_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--batch-sizes", "1,8", "--gammas", "2,4,12", "--quality-modes", "homogeneous_mid,bimodal",
         "--quiet",
         "--scenario", "reference"]
OUTPUTS = ["results/results.csv", "results/verification_comparison.csv", "results/summary.txt",
           "plots/speedup_vs_batch.png", "plots/utilization_vs_batch.png",
           "plots/divergence_penalty.png",
           "plots/gamma_batch_heatmap.png"]


# the outputs with plots, on a grid of one quality mode (the plots' panels are quality mode x
# serving mode: half of SMALL's drawing, which was about 2.6 of its 3 s of CPU)
PLOTTED = ["--batch-sizes", "1,8", "--gammas", "2,4", "--quality-modes", "bimodal", "--quiet",
           "--scenario", "reference"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """SMALL's tables and summary, without plots (plotted_run draws them)."""
    out = tmp_path_factory.mktemp("run")
    assert run.main(SMALL + ["--no-plots", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def plotted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("plotted")
    assert run.main(PLOTTED + ["--out", str(out)]) == 0
    return out


def test_every_output_is_written(plotted_run):
    for rel in OUTPUTS:
        path = plotted_run / rel
        assert path.is_file() and path.stat().st_size > 0, rel
    assert not [p for p in plotted_run.rglob(".tmp-*")]  # no temp files left behind
    assert (plotted_run / "plots/speedup_vs_batch.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_results_csv_has_one_row_per_grid_point_and_the_required_columns(small_run):
    df = pd.read_csv(small_run / "results/results.csv")
    assert len(df) == 2 * 3 * 2 * 2 and (df.scenario == "reference").all()
    required = ["quality_mode", "serving_mode", "batch_size", "gamma", "speedup", "speedup_ci_low",
                "speedup_ci_high",
                "acceptance_rate", "tokens_per_step", "slot_utilization", "divergence_penalty",
                "greedy_throughput_tokens_per_time_unit",
                "speculative_throughput_tokens_per_time_unit",
                "greedy_latency_mean_time_units", "speculative_latency_mean_time_units"]
    assert set(required) <= set(df.columns)
    assert not df.duplicated(["quality_mode", "serving_mode", "batch_size", "gamma"]).any()
    assert ((df.speedup_ci_high - df.speedup_ci_low) / 2 <= 0.02).all()
    for metric in ("speedup", "acceptance_rate", "tokens_per_step", "slot_utilization",
                   "divergence_penalty"):
        assert ((df[f"{metric}_ci_low"] <= df[metric])
                & (df[metric] <= df[f"{metric}_ci_high"])).all(), metric
    assert df.slot_utilization.between(0, 1).all() and df.divergence_penalty.between(0, 1).all()
    # throughput ratio on identical requests is the speedup
    ratio = (df.speculative_throughput_tokens_per_time_unit
             / df.greedy_throughput_tokens_per_time_unit)
    assert (ratio - df.speedup).abs().max() < 1e-4


def test_summary_answers_match_the_csv(small_run):
    df = pd.read_csv(small_run / "results/results.csv")
    text = (small_run / "results/summary.txt").read_text()
    for heading in ("1. Does speculative decoding keep its gains", "2. Which gamma is optimal",
                    "3. Where is speculative decoding slower", "4. A safe default gamma",
                    "5. Ragged vs lockstep"):
        assert heading in text
    worst = df.groupby("gamma").speedup.min()
    mean = df.groupby("gamma").speedup.mean()
    safe = mean[worst >= 1].idxmax() if (worst >= 1).any() else worst.idxmax()
    assert f"-> gamma = {safe}: never below {worst[safe]:.2f}x" in text
    best = df.loc[df.groupby(["quality_mode", "serving_mode", "batch_size"]).speedup.idxmax()]
    row = best[(best.quality_mode == "bimodal") & (best.serving_mode == "static_batch")
               & (best.batch_size == 8)].iloc[0]
    assert f"g={row.gamma} {row.speedup:.2f}x" in text
    slower = (df.speedup_ci_high < 1).sum()
    assert f"{slower} of {len(df)} grid points are significantly slower" in text


def test_lockstep_comparison_shows_the_weakest_request_limiting_the_batch(small_run):
    comp = pd.read_csv(small_run / "results/verification_comparison.csv")
    piv = comp.pivot_table(index=["quality_mode", "serving_mode", "batch_size", "gamma"],
                           columns="verification",
                           values="speedup")
    b1 = piv.xs(1, level="batch_size")
    assert (b1.ragged - b1.lockstep).abs().max() < 0.03  # same policy at batch 1
    b8 = piv.xs(8, level="batch_size")
    assert (b8.lockstep < b8.ragged - 0.2).all()


def test_fixed_seed_gives_byte_identical_results(plotted_run, tmp_path):
    """Rerun with --no-plots: the same results, byte for byte (drawing takes no random numbers),
    and no plots."""
    assert run.main(PLOTTED + ["--no-plots", "--out", str(tmp_path)]) == 0
    for rel in OUTPUTS:
        if rel.startswith("results/"):
            assert (tmp_path / rel).read_bytes() == (plotted_run / rel).read_bytes(), rel
    assert not (tmp_path / "plots").exists()


def test_plots_are_byte_identical_when_drawn_again(plotted_run):
    """A plot drawn twice from the same table is the same file (no time stamps, no
    nondeterministic layout)."""
    from src.reference_plots import plot_divergence_penalty
    from src.reporting import png_bytes
    df = pd.read_csv(plotted_run / "results/results.csv")
    first, again = (png_bytes(plot_divergence_penalty(df)) for _ in range(2))
    assert first == again and first[:8] == b"\x89PNG\r\n\x1a\n"


def test_another_seed_gives_other_numbers(small_run, tmp_path):
    """One of small_run's grid points alone (subsets give the same numbers, see below), seed 1."""
    point = ["--batch-sizes", "8", "--gammas", "4", "--quality-modes", "bimodal", "--serving-modes",
             "continuous_refill", "--quiet", "--scenario", "reference", "--no-plots"]
    assert run.main(point + ["--seed", "1", "--out", str(tmp_path)]) == 0
    other = pd.read_csv(tmp_path / "results/results.csv")
    same = pd.read_csv(small_run / "results/results.csv").merge(other[GRID_KEYS], on=GRID_KEYS)
    assert len(other) == len(same) == 1
    for col in ("speedup", "acceptance_rate", "tokens_per_step"):
        assert other[col].iloc[0] != same[col].iloc[0], col


def test_subsets_and_reorderings_of_the_grid_give_the_same_numbers(small_run):
    full = pd.read_csv(small_run / "results/results.csv", dtype=str)
    cfg = replace(StudyConfig(), batch_sizes=(8,), gammas=(12, 4), quality_modes=("bimodal",),
                  serving_modes=("continuous_refill",))
    assert_rows_match(run_grid(cfg, FlatCostModel(0.2)), full, 2)


def test_committed_results_are_what_the_code_regenerates():
    """The committed results/results.csv must match a fresh run of the same grid points."""
    path = os.path.join(ROOT, "results", "results.csv")
    if not os.path.exists(path):
        pytest.skip("no committed results yet")
    committed = pd.read_csv(path, dtype=str)
    cfg = replace(StudyConfig(), batch_sizes=(4,), gammas=(2, 8), quality_modes=("heterogeneous",),
                  serving_modes=("static_batch",))
    assert_rows_match(run_grid(cfg, FlatCostModel(0.2)),
                      committed[committed.scenario == "reference"], 2)


def test_default_command_runs_the_reference_and_the_hardware_worker(tmp_path, capsys):
    """The default path of `python run.py` (the reference study, and the default hardware scenario
    in a worker process beside it), on a reduced grid; in this process, the worker a real one.
    Without plots: the other tests here and tests/test_hardware_study.py check them."""
    argv = ["--batch-sizes", "1,4", "--gammas", "2", "--quality-modes", "homogeneous_mid",
            "--serving-modes", "continuous_refill", "--no-plots", "--out", str(tmp_path)]
    done = run_main(capsys, argv)
    assert done.returncode == 0, done.stderr
    if (os.cpu_count() or 1) > 1:
        assert "running in a second process" in done.stderr
    df = pd.read_csv(tmp_path / "results/results.csv", dtype=str)
    sc = default_hardware_scenario()
    assert set(df.scenario) == {"reference", sc.name}
    hw = df[df.scenario == sc.name]
    assert set(hw.engine_profile) == set(sc.engine_profiles)
    assert len(hw) == 2 * len(sc.engine_profiles)
    # the worker process gives the numbers an in-process run gives
    cfg = replace(sc.study, batch_sizes=(4,), gammas=(2,), quality_modes=("homogeneous_mid",))
    assert_rows_match(run_grid(cfg, sc.cost_model("vllm-v1")), hw[hw.engine_profile == "vllm-v1"],
                      1)
    text = (tmp_path / "results/summary.txt").read_text()
    assert text.startswith("Batched speculative decoding: summary of the sweep\n====")
    assert text.split("\n\n")[1].startswith("At a glance")
    assert f"Hardware scenario: {sc.name}" in text
    assert "no plots: --no-plots" in done.stderr and not (tmp_path / "plots").exists()


def test_a_single_batch_size_gives_a_summary_without_repeats_or_empty_claims(tmp_path):
    argv = ["--batch-sizes", "8", "--gammas", "2,4", "--quality-modes", "homogeneous_mid",
            "--quiet", "--no-plots",
            "--scenario", "reference", "--out", str(tmp_path)]
    assert run.main(argv) == 0
    text = (tmp_path / "results/summary.txt").read_text()
    rows = [line for line in text.splitlines() if line.startswith("   homogeneous_mid,")]
    assert rows and len(rows) == len(set(rows)), "a table row printed twice"
    assert "B8->B8" not in text and "largest loss" not in text
    assert "static_batch B=8  static_batch B=8" not in text  # one crossover column per serving mode
    assert "the policies agree" not in text  # only batch size 1 makes ragged and lockstep agree
    if "0 of" in text:
        assert "Worst regressions" not in text


def test_a_best_gamma_at_the_top_of_the_grid_is_flagged(tmp_path):
    """Issue 19: `--alpha 0.95 --gammas 1,2` called gamma 2 optimal, silently; the summary now
    says the optimum may lie above the grid and which --gammas would test it."""
    args = ["--scenario", "reference", "--alpha", "0.95", "--gammas", "1,2", "--batch-sizes", "1,4",
            "--quiet", "--no-plots", "--out", str(tmp_path)]
    assert run.main(args) == 0
    text = (tmp_path / "results/summary.txt").read_text()
    section = text.split("\n2. Which gamma is optimal?")[1].split("\n3. ")[0]
    assert "The best gamma is the grid's largest, 2, at 4 of 4 cells" in section
    assert "the optimum may lie above the grid: try --gammas 1,2,3,4." in section
