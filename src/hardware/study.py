"""Run a hardware scenario: its grid under each engine profile (simulated), the steady-state
sweeps over batch x gamma x context (closed form), and the step-time breakdown at the mean context.
"""
from __future__ import annotations

import pandas as pd

from src.costmodel import load_engine_profiles
from src.executor import LocalExecutor
from src.hardware import steady_state
from src.hardware.plots import PLOTS, render_plots
from src.hardware.scenario import Scenario
from src.metrics import best_gamma
from src.processes import stderr_line
from src.reporting import plot_progress, reference_gamma
from src.sweep import draft_shapes, progress_printer, run_grid
from src.workload import acceptance_profile, sample_alpha, sample_lengths, stream

CONTEXTS_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # steady-state context sweep
STEADY_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # steady-state batch sweep (where it fits)


def mean_tokens(seed: int, dist) -> float:
    """Mean of a length distribution (by 100k draws from its own stream; exact for fixed/uniform
    to 0.1%)."""
    return float(sample_lengths(stream(seed, "mean-length", repr(dist)), dist, (100_000,)).mean())


def engine_grid(scenario: Scenario, engine: str, quiet: bool = True) -> pd.DataFrame:
    """The scenario's grid under one engine profile (a top-level function, so a worker can run it);
    progress on stderr unless quiet."""
    progress = progress_printer(quiet, f"{scenario.name}, engine {engine}")
    df = run_grid(scenario.study, scenario.cost_model(engine), progress=progress)
    df.insert(0, "engine_profile", engine)
    return df


def run_scenario(scenario: Scenario, quiet: bool = True, workers: int = 1,
                 executor=None) -> dict:
    """Simulate a hardware scenario under each of its engine profiles, plus the steady-state sweeps.

    With workers > 1 the engine profiles' grids run in parallel processes (same numbers: every grid
    point has its own random stream). Returns {"scenario", "results" (one row per grid point and
    engine profile), "steady" (closed-form speedups over batch x gamma x context), "breakdown"
    (step times at the mean context)}. `executor` (src/executor.py, e.g. Dask) runs the grid
    points instead, each (batch, mode, serving mode) a task.
    """
    cfg = scenario.study
    say = (lambda msg: None) if quiet else stderr_line
    engines = scenario.engine_profiles
    points = (len(cfg.batch_sizes) * len(draft_shapes(cfg)) * len(cfg.quality_modes)
              * len(cfg.serving_modes))
    parallel = workers > 1 and len(engines) > 1
    say(f"hardware scenario {scenario.name}: {len(engines)} engine profiles x {points} grid points"
        + (f", {min(workers, len(engines))} at a time in worker processes" if parallel else ""))
    if executor is not None:
        grids = []
        for e in engines:
            df = run_grid(cfg, scenario.cost_model(e), executor=executor,
                          progress=progress_printer(quiet, f"{scenario.name}, engine {e}"))
            df.insert(0, "engine_profile", e)
            grids.append(df)
    elif workers > 1 and len(engines) > 1:
        grids = (executor or LocalExecutor(workers)).map(
            engine_grid, [(scenario, e, quiet) for e in engines])
    else:
        grids = [engine_grid(scenario, e, quiet) for e in engines]
    say(f"hardware scenario {scenario.name}: steady-state sweeps over batch x gamma x context and "
        "the step-time breakdown")
    steady, breakdown, attribution = [], [], []
    mean_context = mean_tokens(cfg.seed, cfg.prompt_len) + mean_tokens(cfg.seed, cfg.output_len) / 2
    ctx_mean, b_hi = int(round(mean_context)), max(cfg.batch_sizes)
    gamma_ref = reference_gamma(cfg.gammas)
    omega = {m: {g: steady_state.effective_tokens_per_step(
        sample_alpha(stream(cfg.seed, "omega", m), cfg.alpha_modes[m], (20_000,)), g,
        acceptance_profile(cfg.alpha_modes[m])) for g in cfg.gammas}
        for m in cfg.quality_modes}
    profiles = load_engine_profiles(extra_paths=scenario.preset_paths)
    for engine in scenario.engine_profiles:
        cost = scenario.cost_model(engine)
        physics_only = scenario.cost_model(steady_state.physics_only_variant(profiles[engine]))
        for ctx in CONTEXTS_TOKENS + (ctx_mean,):
            times = steady_state.step_times_ms(cost,
                                               sorted(set(STEADY_BATCHES) | set(cfg.batch_sizes)),
                                                 cfg.gammas, ctx)
            for m in cfg.quality_modes:
                t = times.assign(engine_profile=engine, quality_mode=m,
                                 mean_context=ctx == ctx_mean)
                t["speedup"] = steady_state.steady_state_speedups(t, omega[m])
                steady.append(t)
        variant_costs = steady_state.overhead_variant_costs(scenario, profiles[engine])
        for b in cfg.batch_sizes:
            parts = cost.step_breakdown(b, gamma_ref, ctx_mean)
            breakdown.append({"engine_profile": engine, "batch_size": b, "gamma": gamma_ref,
                              "context_len_tokens": parts.context_len_tokens, **{
                                  k: getattr(parts, k)
                                  for k in ("decode_physics_ms", "decode_overhead_ms",
                                                                 "verify_physics_ms",
                                                                 "verify_overhead_ms",
                                                                 "draft_physics_ms",
                                                                 "draft_overhead_ms")},
                              **steady_state.overhead_split_ms(variant_costs, b, gamma_ref,
                                                               ctx_mean)})
        # where the large-batch loss comes from: closed-form best-gamma speedup at the largest batch
        # as each mechanism of the engine profile is added to the physics
        for label, variant_cost in [("physics only", physics_only)] + [(f"+ {p}", c)
                                                                       for p, c in variant_costs]:
            times = steady_state.step_times_ms(variant_cost, [b_hi], cfg.gammas, ctx_mean)
            for m in cfg.quality_modes:
                t = times.assign(quality_mode=m,
                                 speedup=steady_state.steady_state_speedups(times, omega[m]))
                best = best_gamma(t, ["quality_mode"]).iloc[0]
                attribution.append({"engine_profile": engine, "quality_mode": m, "batch_size": b_hi,
                                    "context_len_tokens": ctx_mean, "variant": label,
                                    "gamma": int(best.gamma),
                                    "speedup": float(best.speedup)})
    results = pd.concat(grids, ignore_index=True)
    results.insert(0, "scenario", scenario.name)
    for decoder in ("greedy", "speculative"):  # time unit ms -> tokens per second
        results[f"{decoder}_throughput_tokens_per_s"] = (
            1000 * results[f"{decoder}_throughput_tokens_per_time_unit"])
    trees = results.tree_topk > 1  # tree rows: src/trees/report.py reads them, the rest do not
    return {"scenario": scenario, "results": results[~trees].reset_index(drop=True),
            "tree_results": results[trees].reset_index(drop=True),
            "steady": pd.concat(steady, ignore_index=True),
            "breakdown": pd.DataFrame(breakdown), "attribution": pd.DataFrame(attribution),
            "mean_context": mean_context}


def hardware_job(scenario: Scenario, quiet: bool, workers: int = 1, plots: bool = True,
                 executor=None) -> dict:
    """run_scenario plus its plots ({} when `plots` is False), rendered where it ran (so a worker
    process returns PNG bytes)."""
    hw = run_scenario(scenario, quiet=quiet, workers=workers, executor=executor)
    hw["plots"] = (render_plots(hw, plot_progress(quiet, f"{scenario.name}", len(PLOTS)))
                   if plots else {})
    return hw
