"""src/hardware/ (steady state, schedules, study run) and the hardware part of the run."""
import json
import re

import numpy as np
import pandas as pd
import pytest

import run
from src.acceptance import expected_tokens_per_step
from src.hardware import schedules, steady_state
from src.hardware.scenario import default_hardware_scenario
from src.sweep import run_grid
from tests.helpers import assert_rows_match

SCENARIO = "configs/scenarios/h100-llama8b-1b.toml"
FAST = "tests/fast_study.toml"


def test_effective_tokens_per_step_is_the_harmonic_mean():
    alphas = np.array([0.9, 0.5])
    per_request = expected_tokens_per_step(alphas, 3)
    assert steady_state.effective_tokens_per_step(alphas,
                                                  3) == pytest.approx(2 / (1 / per_request).sum())
    assert steady_state.effective_tokens_per_step(np.full(5, 0.7),
                                                  4) == pytest.approx(expected_tokens_per_step(0.7,
                                                                                               4))


def test_effective_tokens_per_step_of_a_per_position_mode_is_its_closed_form():
    from src.acceptance import expected_tokens_per_step_per_position, hazard_profile, mean_hazard
    # EAGLE's Vicuna-7B n-alpha row, as in the EAGLE scenario
    rates = (0.79, 0.74, 0.72, 0.73, 0.67)
    alpha = np.full(3, np.exp(-mean_hazard(rates)))  # scale 1: the mode's own rates
    omega = steady_state.effective_tokens_per_step(alpha, 6, hazard_profile(rates, 64))
    assert omega == pytest.approx(expected_tokens_per_step_per_position(rates, 6))


def test_schedule_ranges_are_inclusive_cover_every_batch_and_merge_equal_neighbours():
    ranges = schedules.schedule_ranges([1, 2, 4, 8, 16, 32, 64, 128], [3, 3, 3, 2, 2, 1, 0, 0], 128)
    assert ranges == [[1, 7, 3], [8, 31, 2], [32, 63, 1], [64, 128, 0]]
    covered = [b for lo, hi, _ in ranges for b in range(lo, hi + 1)]
    assert covered == list(range(1, 129))
    # a grid that does not start at batch 1 still gives a schedule that starts at 1, as vLLM
    # requires
    assert schedules.schedule_ranges([4, 16], [2, 1], 64) == [[1, 15, 2], [16, 64, 1]]


def vllm_schedule_problems(cfg: dict) -> list[str]:
    """What vLLM's dynamic speculative decoding validation would refuse in a --speculative-config
    (rules of validate_and_normalize_dynamic_sd_schedule in vllm/v1/spec_decode/dynamic/utils.py
    and SpeculativeConfig's num_speculative_tokens > 0, restated here)."""
    k_max = cfg.get("num_speculative_tokens")
    entries = cfg.get("num_speculative_tokens_per_batch_size")
    problems = []
    if not isinstance(k_max, int) or k_max <= 0:
        problems.append("num_speculative_tokens must be an integer > 0")
    if not isinstance(entries, list) or not entries:
        return problems + ["the schedule must be a non-empty list"]
    prev_hi = 0
    for entry in entries:
        if not isinstance(entry,
                          list) or len(entry) != 3 or not all(isinstance(v, int) for v in entry):
            problems.append(f"{entry!r} is not a 3-item list of integers")
            continue
        lo, hi, k = entry
        if lo <= 0 or hi <= 0 or lo > hi or k < 0:
            problems.append(f"{entry!r}: need 1 <= low <= high and K >= 0")
        if lo <= prev_hi:
            problems.append(f"{entry!r} overlaps or is out of order")
        prev_hi = hi
    if entries[0][0] != 1:
        problems.append("the first range must start at 1")
    return problems


def vllm_k_at(cfg: dict, batch: int) -> int:
    """The K vLLM runs at a batch size: the range holding it, else the previous range's K (gaps and
    the tail beyond the last range inherit), capped at num_speculative_tokens."""
    k = None
    for lo, hi, entry_k in cfg["num_speculative_tokens_per_batch_size"]:
        if lo <= batch:
            k = entry_k
    return min(cfg["num_speculative_tokens"], k)


def test_vllm_config_has_the_shape_vllm_validates_and_runs_the_best_gamma_per_batch():
    batches, gammas = [1, 2, 4, 8, 16, 32, 64, 128], [3, 3, 3, 2, 2, 1, 0, 0]
    s = {"max_gamma": max(gammas), "ranges": schedules.schedule_ranges(batches, gammas, 128)}
    cfg = json.loads(schedules.vllm_config_json(s))
    assert cfg == {"num_speculative_tokens": 3,
                   "num_speculative_tokens_per_batch_size": [[1, 7, 3], [8, 31, 2], [32, 63, 1],
                                                             [64, 128, 0]]}
    assert vllm_schedule_problems(cfg) == []
    assert [vllm_k_at(cfg, b) for b in batches] == gammas
    assert vllm_k_at(cfg, 1000) == 0  # beyond the grid vLLM keeps the last K
    # the checker is not vacuous: the dict-of-strings form vLLM refuses is caught
    assert vllm_schedule_problems({"num_speculative_tokens": 3,
                                   "num_speculative_tokens_per_batch_size": {"1-16": 3,
                                                                             "17-128": 0}})
    assert vllm_schedule_problems({"num_speculative_tokens": 2,
                                   "num_speculative_tokens_per_batch_size": [[2, 8, 2]]})


def test_no_config_when_speculation_never_pays():
    s = {"max_gamma": 0, "ranges": schedules.schedule_ranges([1, 8], [0, 0], 8)}
    assert schedules.vllm_speculative_config(s) is None
    assert "leave --speculative-config unset" in schedules.vllm_config_json(s)


def test_crossover_batch_is_the_first_batch_below_one():
    assert schedules.crossover_batch(np.array([1, 2, 4, 8]), np.array([1.4, 1.1, 0.98, 1.02])) == 4
    assert schedules.crossover_batch(np.array([1, 2]), np.array([1.4, 1.1])) is None


def test_context_rules_merge_contexts_then_batches():
    rows = [(b, c, g) for b, c, g in [(1, 512, 4), (1, 2048, 4), (2, 512, 4), (2, 2048, 4),
                                      (64, 512, 3), (64, 2048, 2)]]
    df = pd.DataFrame(rows, columns=["batch_size", "context_len_tokens", "schedule_gamma"])
    assert schedules.context_rules(df) == [(1, 2, 512, 2048, 4), (64, 64, 512, 512, 3),
                                           (64, 64, 2048, 2048, 2)]


def _grid(points: dict, half: float = 0.01) -> pd.DataFrame:
    """A simulated grid of one (engine, mode, serving): {batch: {gamma: speedup}}, CI +-half."""
    return pd.DataFrame([{"engine_profile": "e", "quality_mode": "m",
                          "serving_mode": "continuous_refill", "batch_size": b, "gamma": g,
                          "speedup": v, "speedup_ci_low": v - half, "speedup_ci_high": v + half}
                         for b, by_g in points.items() for g, v in by_g.items()])


def test_schedule_keeps_a_gamma_within_the_ci_of_the_best():
    # gamma 5 edges ahead at B=2 and B=4 but within the CIs: no switch away from gamma 4
    grid = _grid({1: {3: 1.80, 4: 1.95, 5: 1.94}, 2: {3: 1.79, 4: 1.940, 5: 1.945},
                  4: {3: 1.78, 4: 1.91, 5: 1.925}})
    r = schedules.resolved_gammas(grid)
    assert r.gamma.tolist() == [4, 4, 4] and r.best_gamma.tolist() == [4, 5, 5]
    [s] = schedules.schedules(grid)
    assert s["ranges"] == [[1, 4, 4]] and s["max_gamma"] == 4
    assert s["within_ci"].batch_size.tolist() == [2, 4]
    # the point-best rule would have switched: the CIs are what holds gamma 4
    narrow = schedules.resolved_gammas(_grid({1: {4: 1.95, 5: 1.94}, 2: {4: 1.94, 5: 1.945}},
                                             half=0.001))
    assert narrow.gamma.tolist() == [4, 5]


def test_schedule_switches_where_the_difference_is_resolved():
    # B=64: gamma 3 beats gamma 4 by more than both CIs; B=1: gammas 4 and 5 tie within CI, the
    # smaller is taken
    grid = _grid({1: {3: 1.80, 4: 1.940, 5: 1.945}, 64: {3: 1.60, 4: 1.55, 5: 1.50}})
    r = schedules.resolved_gammas(grid)
    assert r.gamma.tolist() == [4, 3] and r.best_gamma.tolist() == [5, 3]
    assert schedules.schedules(grid)[0]["ranges"] == [[1, 63, 4], [64, 64, 3]]
    # speculation goes off only where greedy (speedup 1) is clearly better than every gamma
    off = schedules.resolved_gammas(_grid({1: {1: 1.2}, 8: {1: 0.995}, 16: {1: 0.95}}))
    assert off.gamma.tolist() == [1, 1, 0] and off.best_gamma.tolist() == [1, 0, 0]


def _b1_frames(sim_speedups: dict, closed_speedups: dict, half: float):
    sim = pd.DataFrame([{"engine_profile": "e", "quality_mode": "m", "batch_size": 1, "gamma": g,
                         "speedup": v, "speedup_ci_low": v - half, "speedup_ci_high": v + half}
                        for g, v in sim_speedups.items()])
    closed = pd.DataFrame([{"engine_profile": "e", "quality_mode": "m", "batch_size": 1,
                            "gamma": g, "speedup": v, "mean_context": True}
                           for g, v in closed_speedups.items()])
    return sim, closed


def test_batch_one_note_explains_a_disagreement_with_the_numbers():
    from src.hardware.report import batch_one_note

    sim, closed = _b1_frames({4: 1.95, 5: 1.934}, {4: 1.964, 5: 1.968}, 0.01)
    text = "\n".join(batch_one_note(sim, closed, ["e"], ["m"], 1616.0, 0.95))
    assert "e, m: closed form g5 1.968 vs g4 1.964 (0.2% apart)" in text
    assert "simulated g4 1.950 [1.940, 1.960] vs g5 1.934 [1.924, 1.944]" in text
    assert "mean context, 1616 tokens" in text and "either gamma is as good" in text
    # a closed-form gap wider than the simulation's CIs is not called noise
    sim, closed = _b1_frames({4: 1.95, 5: 1.934}, {4: 1.90, 5: 1.968}, 0.001)
    text = "\n".join(batch_one_note(sim, closed, ["e"], ["m"], 1616.0, 0.95))
    assert "not only noise" in text and "as good" not in text
    # where both models pick the same gamma there is nothing to explain
    sim, closed = _b1_frames({4: 1.95, 5: 1.934}, {4: 1.968, 5: 1.964}, 0.01)
    assert batch_one_note(sim, closed, ["e"], ["m"], 1616.0, 0.95) == []


def test_steady_state_speedup_formula_and_memory_limit():
    cost = default_hardware_scenario().cost_model("ideal")
    times = steady_state.step_times_ms(cost, [1, 64, 4096], [2], 2048)
    assert set(times.batch_size) == {1, 64}  # 4096 sequences of 2k tokens do not fit on one H100
    omega = {2: expected_tokens_per_step(0.8, 2)}
    speedup = steady_state.steady_state_speedups(times, omega)
    expected = omega[2] * times.t_ar_ms / (times.t_draft_ms + times.t_verify_ms)
    assert np.allclose(speedup, expected)
    # verification of 64 x 3 positions costs more than 1 x 3
    assert speedup.iloc[0] > speedup.iloc[1]


@pytest.fixture(scope="module")
def hardware_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hw")
    # tests/fast_study.toml: outputs of 32-64 tokens and a CI half-width of 0.05 (about 2 s of CPU
    # less than the scenario's 64-256 and 0.015); what is asserted is the shape of the outputs,
    # the schedules and the cost models' order, not the figures
    # --no-plots: the plots would take about 60% of this run's CPU (6 of 10 s); they are drawn
    # by test_scenario_run_draws_its_plots on a grid of one panel per engine profile
    argv = ["--config", FAST, "--scenario", SCENARIO, "--batch-sizes", "1,16,128", "--gammas",
            "1,3", "--quality-modes", "homogeneous_good,heterogeneous", "--out", str(out),
            "--quiet", "--no-plots"]
    assert run.main(argv) == 0
    return out


HARDWARE_PLOTS = ("hardware_speedup_vs_batch.png", "hardware_optimal_gamma.png",
                  "hardware_speedup_by_context.png", "hardware_step_breakdown.png")


def test_scenario_run_draws_its_plots(tmp_path):
    """A scenario run with plots writes every hardware plot as a PNG (two engine profiles, one
    quality mode, two batches and one gamma: every branch of the plots' code, panels in rows and
    columns, at a quarter of the drawing of hardware_run's grid)."""
    argv = ["--config", FAST, "--scenario", SCENARIO, "--batch-sizes", "1,16", "--gammas", "1",
            "--quality-modes", "homogeneous_good", "--engine-profiles", "vllm-v1,ideal",
            "--out", str(tmp_path), "--quiet"]
    assert run.main(argv) == 0
    for name in HARDWARE_PLOTS:
        data = (tmp_path / "plots" / name).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000, name


def test_scenario_run_writes_its_files_and_answers(hardware_run):
    for rel in ("results/results.csv", "results/summary.txt", "results/hardware_steady_state.csv",
                "results/hardware_step_breakdown.csv"):
        assert (hardware_run / rel).stat().st_size > 0, rel
    df = pd.read_csv(hardware_run / "results/results.csv")
    assert set(df.scenario) == {"h100-llama8b-1b"}
    assert set(df.engine_profile) == {"ideal", "sglang", "trtllm", "vllm-v1"}
    assert len(df) == 4 * 3 * 2 * 2 and (df.time_unit == "ms").all()
    assert np.allclose(df.speculative_throughput_tokens_per_s / df.greedy_throughput_tokens_per_s,
                       df.speedup, rtol=1e-4)
    text = (hardware_run / "results/summary.txt").read_text()
    for heading in ("Assumptions", "H1.", "H2.", "H3.", "H4.", "H5.", "H6.", "cost model", "H100"):
        assert heading in text
    # the printed schedules are valid JSON that vLLM's speculative_config takes
    configs = [json.loads(line.strip()) for line in text.splitlines()
               if line.strip().startswith('{"num_speculative')]
    assert len(configs) == 8  # 4 engine profiles x 2 quality modes
    for cfg in configs:
        assert vllm_schedule_problems(cfg) == []
        entries = cfg["num_speculative_tokens_per_batch_size"]
        assert cfg["num_speculative_tokens"] == max(k for _, _, k in entries)
    # a kept gamma that is not the best point estimate is reported with CIs that overlap
    assert "switches gamma only where the" in text
    # what H3's schedules were optimised for, so that a reader can tell them from serve's
    h3 = text.split("\nH3. ")[1].split("\nH4. ")[0]
    assert re.search(r"Optimised for: this study's simulated fixed batch \(every request queued at"
                     r"\s+time 0, prompts", h3)
    for line in text.splitlines():
        if "is within the CI of the best" in line:
            kept, best = re.findall(r"([\d.]+) \[([\d.]+), ([\d.]+)\]", line)
            assert float(kept[0]) <= float(best[0]) and float(kept[2]) >= float(best[1])
    # vllm-v1 against ideal: its fused kernels (8 per layer, not 10) and its GEMM efficiencies
    # re-fitted to vLLM's measured kernels (src/presets/kernel_efficiency.toml) make its
    # compute-bound verification passes cheaper, an edge over ideal at batch 16 and 128; at batch
    # 1 its target GEMMs are vLLM 0.24.0's measured kernels, where a verification of 2-6 rows
    # costs more than greedy's one row (down projection 4096 x 14336 on H100: 0.042 ms at m = 1,
    # 0.049 ms at m = 5) while the roofline prices both as one read of the weights, so its
    # speculation gains less than ideal's there
    piv = df.pivot_table(index=["quality_mode", "gamma", "batch_size"], columns="engine_profile",
                         values="speedup")
    edge = (piv["vllm-v1"] - piv["ideal"]).unstack("batch_size")
    assert (edge[1] < 0).all() and (edge[[16, 128]] > 0).all().all()
    assert (edge.abs() < 0.1).all().all()


def test_closed_form_agrees_with_the_simulation_at_the_mean_context(hardware_run):
    text = (hardware_run / "results/summary.txt").read_text()
    line = next(x for x in text.splitlines() if "Closed form vs simulation" in x)
    worst = float(line.split("worst ")[1].split("%")[0])
    assert worst < 10.0, line


def test_bad_scenario_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[scenario]\nname = "x"\ngpu = "h900"\ntarget = "llama-3.1-8b"\ndraft = '
                   '"llama-3.2-1b"\n')
    out = tmp_path / "out"
    assert run.main(["--scenario", str(bad), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "scenario.gpu" in err and "h900" in err
    assert not out.exists()


def test_batch_that_does_not_fit_is_refused_by_name(tmp_path, capsys):
    assert run.main(["--scenario", SCENARIO, "--batch-sizes", "1,512", "--out", str(tmp_path / "o"),
                     "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "study.batch_sizes" in err and "up to" in err


def test_committed_hardware_results_are_what_the_code_regenerates():
    """Rows of the default hardware scenario in the committed results.csv match a fresh run."""
    import os
    from dataclasses import replace

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    committed = pd.read_csv(os.path.join(root, "results", "results.csv"), dtype=str)
    sc = default_hardware_scenario()
    committed = committed[(committed.scenario == sc.name) & (committed.engine_profile == "vllm-v1")]
    cfg = replace(sc.study, batch_sizes=(16,), gammas=(3,), quality_modes=("bimodal",))
    assert_rows_match(run_grid(cfg, sc.cost_model("vllm-v1")), committed, 1)


def test_optimal_gamma_plot_draws_the_gamma_the_h3_schedule_uses():
    """Issue 19: the plot showed gamma 5 at B=2-4 where the H3 schedule keeps 4. Its cells are
    now the schedule's gamma, with the best point estimate noted where it differs."""
    from src.hardware.plots import optimal_gamma_cells
    sc = default_hardware_scenario()
    res = pd.read_csv("results/results.csv")
    hw = {"scenario": sc, "results": res[res.scenario == sc.name],
          "steady": pd.read_csv("results/hardware_steady_state.csv")}
    serving = sc.study.serving_modes[-1]
    sim = hw["results"][hw["results"].serving_mode == serving]
    modes, batches = list(dict.fromkeys(sim.quality_mode)), sorted(set(sim.batch_size))
    cells = optimal_gamma_cells(hw)
    for s in schedules.schedules(sim):
        grid, labels = cells[s["engine_profile"]]
        k = modes.index(s["quality_mode"])
        for x, b in enumerate(batches):
            gamma = next(g for lo, hi, g in s["ranges"] if lo <= b <= hi)
            assert grid[k, x] == gamma and labels[k][x].split("\n")[0] == str(gamma)
        for r in s["within_ci"].itertuples():
            assert f"best {r.best_gamma}" in labels[k][batches.index(r.batch_size)]
