"""Run the batched speculative decoding study: sweep the grid, write results/ and plots/.

    python run.py                      # the reference study (7 batch sizes x 7 gammas x 4 x 2)
    python run.py --help               # every option
    python run.py step-time --help     # forward-pass time calculator (hardware cost model)

Each grid point (quality mode, serving mode, batch size, gamma) simulates greedy and speculative
decoding on the identical requests, adding blocks of independent replications until the speedup's
confidence interval is as tight as `ci_half_width` (design.md, "Statistics").
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import pandas as pd

from src import analysis, hardware_study
from src.baseline import simulate_greedy
from src.config import (
    ConfigError, OneLineArgumentParser, StudyConfig, alpha_mode_label, build_config, check_alpha, load_toml,
)
from src.costmodel import CostModel, FlatCostModel, load_engine_profiles
from src.metrics import grid_point_metrics
from src.serving import concat_stats
from src.scenario import Scenario, check_memory, default_hardware_scenario, load_scenario
from src.speculative import simulate_speculative
from src.workload import make_requests, sample_alpha, sample_lengths, stream

GRID_KEYS = ("quality_mode", "serving_mode", "batch_size", "gamma")


class _Sweep:
    """Caches what grid points share: requests per (mode, batch, block), greedy runs per
    (serving mode, batch, block). Greedy depends only on lengths, which every mode shares."""

    def __init__(self, cfg: StudyConfig, cost: CostModel):
        self.cfg, self.cost = cfg, cost
        self._requests: dict = {}
        self._greedy: dict = {}

    def requests(self, mode: str, batch_size: int, block: int):
        key = (mode, batch_size, block)
        if key not in self._requests:
            cfg = self.cfg
            self._requests[key] = make_requests(
                cfg.seed, mode, cfg.alpha_modes[mode], cfg.output_len, cfg.prompt_len, batch_size,
                block, cfg.replications_per_block(batch_size), cfg.requests_per_slot * batch_size)
        return self._requests[key]

    def greedy(self, mode: str, serving: str, batch_size: int, block: int):
        key = (serving, batch_size, block)
        if key not in self._greedy:
            self._greedy[key] = simulate_greedy(self.requests(mode, batch_size, block), batch_size, serving, self.cost)
        return self._greedy[key]

    def grid_points(self, mode: str, serving: str, batch_size: int, gammas: tuple[int, ...],
                    verification: str) -> list[dict]:
        """Rows for every gamma of one (mode, serving mode, batch size).

        Block b of gamma g uses the requests of block b and the stream keyed (..., g, b); a gamma
        stops taking blocks once its CI is tight enough, so its numbers do not depend on which
        other gammas run beside it.
        """
        cfg = self.cfg
        blocks: dict[int, list] = {g: [] for g in gammas}  # gamma -> [(greedy, speculative) per block]
        rows: dict[int, dict] = {}
        block = 0
        while len(rows) < len(gammas):
            todo = [g for g in gammas if g not in rows]
            rngs = [stream(cfg.seed, "accept", mode, serving, batch_size, g, verification, block) for g in todo]
            greedy = self.greedy(mode, serving, batch_size, block)
            specs = simulate_speculative(self.requests(mode, batch_size, block), batch_size, serving,
                                         self.cost, todo, verification, rngs)
            for g, spec in zip(todo, specs):
                blocks[g].append((greedy, spec))
                row = grid_point_metrics(concat_stats([b[0] for b in blocks[g]]),
                                         concat_stats([b[1] for b in blocks[g]]), batch_size, cfg.confidence)
                half_width = (row["speedup_ci_high"] - row["speedup_ci_low"]) / 2
                if half_width <= cfg.ci_half_width or row["replications"] >= cfg.max_replications:
                    rows[g] = row
            block += 1
        alpha_mean = float(self.requests(mode, batch_size, 0).alpha.mean())
        return [{"quality_mode": mode, "serving_mode": serving, "batch_size": batch_size, "gamma": g,
                 "verification": verification, "alpha_mean": alpha_mean, **rows[g]} for g in gammas]


def run_grid(cfg: StudyConfig, cost: CostModel, verification: str | None = None,
             progress=None, sweep: _Sweep | None = None) -> pd.DataFrame:
    """Sweep every (quality mode, serving mode, batch size, gamma) of cfg; one row per point.

    Pass the `sweep` of an earlier call with the same workload and cost model to reuse its
    requests and greedy runs."""
    verification = verification or cfg.verification
    sweep = sweep or _Sweep(cfg, cost)
    points = [(b, m, s) for b in cfg.batch_sizes for m in cfg.quality_modes for s in cfg.serving_modes]
    rows = []
    for i, (b, m, s) in enumerate(points):
        rows += sweep.grid_points(m, s, b, cfg.gammas, verification)
        if progress:
            progress(len(rows), len(points) * len(cfg.gammas))
    df = pd.DataFrame(rows)
    order = {k: list(v) for k, v in (("quality_mode", cfg.quality_modes), ("serving_mode", cfg.serving_modes))}
    for key, values in order.items():
        df[key] = pd.Categorical(df[key], categories=values, ordered=True)
    df = df.sort_values(list(GRID_KEYS), kind="stable").reset_index(drop=True)
    for key in order:
        df[key] = df[key].astype(str)
    return df


def comparison_config(cfg: StudyConfig) -> StudyConfig:
    """The lockstep-vs-ragged companion sweep: the two smallest gammas >= 2 (or the smallest)."""
    gammas = [g for g in cfg.gammas if g >= 2][:2] or list(cfg.gammas[:1])
    return replace(cfg, gammas=tuple(gammas))


CONTEXTS_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)  # steady-state context sweep
STEADY_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # steady-state batch sweep (where it fits)


def mean_tokens(seed: int, dist) -> float:
    """Mean of a length distribution (by 100k draws from its own stream; exact for fixed/uniform to 0.1%)."""
    return float(sample_lengths(stream(seed, "mean-length", repr(dist)), dist, (100_000,)).mean())


def engine_grid(scenario: Scenario, engine: str, progress=None) -> pd.DataFrame:
    """The scenario's grid under one engine profile (a top-level function, so a worker can run it)."""
    df = run_grid(scenario.study, scenario.cost_model(engine), progress=progress)
    df.insert(0, "engine_profile", engine)
    return df


def run_scenario(scenario: Scenario, progress=None, say=lambda msg: None, workers: int = 1) -> dict:
    """Simulate a hardware scenario under each of its engine profiles, plus the steady-state sweeps.

    With workers > 1 the engine profiles' grids run in parallel processes (same numbers: every grid
    point has its own random stream). Returns {"scenario", "results" (one row per grid point and
    engine profile), "steady" (closed-form speedups over batch x gamma x context), "breakdown"
    (step times at the mean context)}.
    """
    cfg = scenario.study
    say(f"scenario {scenario.name}: {len(scenario.engine_profiles)} engine profiles x "
        f"{len(cfg.batch_sizes) * len(cfg.gammas) * len(cfg.quality_modes) * len(cfg.serving_modes)} grid points")
    if workers > 1 and len(scenario.engine_profiles) > 1:
        with ProcessPoolExecutor(max_workers=min(workers, len(scenario.engine_profiles))) as pool:
            grids = list(pool.map(engine_grid, [scenario] * len(scenario.engine_profiles), scenario.engine_profiles))
    else:
        grids = [engine_grid(scenario, e, progress) for e in scenario.engine_profiles]
    steady, breakdown, attribution = [], [], []
    mean_context = mean_tokens(cfg.seed, cfg.prompt_len) + mean_tokens(cfg.seed, cfg.output_len) / 2
    ctx_mean, b_hi = int(round(mean_context)), max(cfg.batch_sizes)
    gamma_ref = analysis.reference_gamma(cfg.gammas)
    omega = {m: {g: hardware_study.effective_tokens_per_step(
        sample_alpha(stream(cfg.seed, "omega", m), cfg.alpha_modes[m], (20_000,)), g) for g in cfg.gammas}
        for m in cfg.quality_modes}
    profiles = load_engine_profiles()
    physics_only = scenario.cost_model(profiles["ideal"])
    for engine in scenario.engine_profiles:
        cost = scenario.cost_model(engine)
        for ctx in CONTEXTS_TOKENS + (ctx_mean,):
            times = hardware_study.step_times_ms(cost, sorted(set(STEADY_BATCHES) | set(cfg.batch_sizes)),
                                                 cfg.gammas, ctx)
            for m in cfg.quality_modes:
                t = times.assign(engine_profile=engine, quality_mode=m, mean_context=ctx == ctx_mean)
                t["speedup"] = hardware_study.steady_state_speedups(t, omega[m])
                steady.append(t)
        variant_costs = hardware_study.overhead_variant_costs(scenario, profiles[engine])
        for b in cfg.batch_sizes:
            parts = cost.step_breakdown(b, gamma_ref, ctx_mean)
            breakdown.append({"engine_profile": engine, "batch_size": b, "gamma": gamma_ref,
                              "context_len_tokens": parts.context_len_tokens, **{
                                  k: getattr(parts, k) for k in ("decode_physics_ms", "decode_overhead_ms",
                                                                 "verify_physics_ms", "verify_overhead_ms",
                                                                 "draft_physics_ms", "draft_overhead_ms")},
                              **hardware_study.overhead_split_ms(variant_costs, b, gamma_ref, ctx_mean)})
        # where the large-batch loss comes from: closed-form best-gamma speedup at the largest batch
        # as each mechanism of the engine profile is added to the physics
        for label, variant_cost in [("physics only", physics_only)] + [(f"+ {p}", c) for p, c in variant_costs]:
            times = hardware_study.step_times_ms(variant_cost, [b_hi], cfg.gammas, ctx_mean)
            for m in cfg.quality_modes:
                t = times.assign(speedup=hardware_study.steady_state_speedups(times, omega[m]))
                best = t.loc[t.speedup.idxmax()]
                attribution.append({"engine_profile": engine, "quality_mode": m, "batch_size": b_hi,
                                    "context_len_tokens": ctx_mean, "variant": label, "gamma": int(best.gamma),
                                    "speedup": float(best.speedup)})
    results = pd.concat(grids, ignore_index=True)
    results.insert(0, "scenario", scenario.name)
    results["greedy_throughput_tokens_per_s"] = 1000 * results.greedy_throughput_tokens_per_time_unit
    results["speculative_throughput_tokens_per_s"] = 1000 * results.speculative_throughput_tokens_per_time_unit
    return {"scenario": scenario, "results": results, "steady": pd.concat(steady, ignore_index=True),
            "breakdown": pd.DataFrame(breakdown), "attribution": pd.DataFrame(attribution),
            "mean_context": mean_context}


def hardware_job(scenario: Scenario, quiet: bool, workers: int = 1) -> dict:
    """run_scenario plus its plots, rendered where it ran (so a worker process returns PNG bytes)."""
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr))
    hw = run_scenario(scenario, progress=_progress_printer(quiet), say=say, workers=workers)
    hw["plots"] = analysis.render_hardware_plots(hw)
    return hw


def make_parser() -> argparse.ArgumentParser:
    d = StudyConfig()
    p = OneLineArgumentParser(
        prog="python run.py",
        description="Simulate speculative vs greedy decoding over a grid of batch sizes, gammas, draft-quality "
                    "modes and serving modes; write results/results.csv, results/summary.txt and plots/.",
        epilog="Subcommand: 'python run.py step-time --help' prints forward-pass times of real GPUs and models. "
               "Lists are comma-separated, e.g. --gammas 2,4,8. Options override --config, which overrides defaults.")
    p.add_argument("--batch-sizes", help=f"batch sizes, 1..4096 (default {','.join(map(str, d.batch_sizes))})")
    p.add_argument("--gammas", help=f"draft tokens per step, 1..64 (default {','.join(map(str, d.gammas))})")
    p.add_argument("--quality-modes", help=f"draft-quality modes (default {','.join(d.quality_modes)}; "
                                           "more can be defined in --config)")
    p.add_argument("--serving-modes", help=f"serving modes (default {','.join(d.serving_modes)})")
    p.add_argument("--verification", help="ragged (default: each sequence keeps its own accepted prefix) or "
                                          "lockstep (the batch advances by its smallest accepted count)")
    p.add_argument("--seed", help=f"root random seed (default {d.seed})")
    p.add_argument("--alpha", help="run a single point-mass quality mode with this acceptance probability, 0 < A < 1")
    p.add_argument("--draft-cost", help=f"cost of one draft pass in target passes (default {d.draft_cost})")
    p.add_argument("--config", help="TOML file setting any configuration field (see configs/example.toml)")
    p.add_argument("--scenario", help="'reference' runs only the flat-cost reference study; a scenario TOML file "
                                      "(configs/scenarios/) runs only that hardware deployment, into runs/NAME "
                                      "unless --out is given. Default: the reference study and the default "
                                      "hardware scenario (H100, Llama-3.1-8B + Llama-3.2-1B).")
    p.add_argument("--out", help="output folder; writes OUT/results and OUT/plots (default: . , or runs/NAME "
                                 "for a scenario file)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


OPTION_FIELDS = {"batch_sizes": "--batch-sizes", "gammas": "--gammas", "quality_modes": "--quality-modes",
                 "serving_modes": "--serving-modes", "verification": "--verification", "seed": "--seed",
                 "draft_cost": "--draft-cost"}


def config_from_args(args: argparse.Namespace) -> StudyConfig:
    """Defaults, then --config, then options; raises ConfigError naming the file key or option."""
    cfg = StudyConfig()
    if args.config:
        raw = load_toml(args.config)
        try:
            cfg = build_config(raw, cfg)
        except ConfigError as e:
            raise ConfigError(f"--config {args.config}", str(e)) from None
    overrides = {f: getattr(args, f) for f in OPTION_FIELDS if getattr(args, f) is not None}
    try:
        if args.alpha is not None:
            if args.quality_modes is not None:
                raise ConfigError("--alpha", "use either --alpha or --quality-modes, not both")
            a = check_alpha("--alpha", args.alpha)
            overrides["alpha_modes"] = {alpha_mode_label(a): {"kind": "point", "value": a}}
            overrides["quality_modes"] = [alpha_mode_label(a)]
        return build_config(overrides, cfg)
    except ConfigError as e:
        if e.field_name in OPTION_FIELDS:
            raise ConfigError(OPTION_FIELDS[e.field_name], str(e).split(": ", 1)[1]) from None
        raise


def _check_out_dir(out: str) -> None:
    """Refuse an output folder that is a file or cannot be written, before any simulation runs."""
    for path in (out, os.path.join(out, "results"), os.path.join(out, "plots")):
        if os.path.exists(path) and not os.path.isdir(path):
            raise ConfigError("--out", f"{path} exists and is not a folder")
    probe = out
    while not os.path.exists(probe):  # the nearest existing ancestor must be a writable folder
        probe = os.path.dirname(os.path.abspath(probe))
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError("--out", f"cannot create or write {out} ({probe} is not a writable folder)")


def _progress_printer(quiet: bool):
    if quiet:
        return None
    start = time.perf_counter()

    def progress(done, total):
        if done == total or done % max(1, total // 10) < done - progress.last:
            progress.last = done
            print(f"  {done}/{total} grid points ({time.perf_counter() - start:.1f} s)", file=sys.stderr)

    progress.last = 0
    return progress


def scenario_from_args(args: argparse.Namespace, cfg: StudyConfig) -> Scenario | None:
    """The hardware scenario to run (None for --scenario reference), with the command line's grid
    options applied over the scenario's own [study] table."""
    if args.scenario == "reference":
        return None
    try:
        scenario = default_hardware_scenario() if args.scenario is None else load_scenario(args.scenario)
    except ConfigError as e:
        if e.field_name == "--scenario":  # the file itself could not be read
            raise
        raise ConfigError(f"--scenario {args.scenario}", str(e)) from None
    # fields set on the command line or in --config apply to the scenario's grid too; draft_cost
    # belongs to the flat cost model and does not
    explicit = set(load_toml(args.config)) if args.config else set()
    explicit |= {f for f in OPTION_FIELDS if getattr(args, f) is not None}
    if args.alpha is not None:
        explicit |= {"alpha_modes", "quality_modes"}
    if explicit & {"alpha_modes", "quality_modes"}:
        explicit |= {"alpha_modes", "quality_modes"}
    overrides = {f: getattr(cfg, f) for f in sorted(explicit - {"draft_cost"})}
    if overrides:
        scenario = replace(scenario, study=replace(scenario.study, **overrides))
        try:
            check_memory(scenario)
        except ConfigError as e:
            if args.scenario is not None:
                raise
            raise ConfigError("--batch-sizes", f"{str(e).split(': ', 1)[1]}. The default run also simulates the "
                                               f"hardware scenario {scenario.name}; use --scenario reference to run "
                                               "the flat-cost study alone") from None
    return scenario


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "step-time":
        from src.stepcalc import main as step_time_main
        return step_time_main(argv[1:])
    args = make_parser().parse_args(argv)
    try:
        cfg = config_from_args(args)
        scenario = scenario_from_args(args, cfg)
        only_scenario = args.scenario not in (None, "reference")
        out = args.out or (os.path.join("runs", scenario.name) if only_scenario else ".")
        _check_out_dir(out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    reference = comparison = cost = pool = pending = None
    if scenario is not None and not only_scenario and (os.cpu_count() or 1) > 1:
        # the hardware scenario runs in a second process beside the reference study (both are
        # single-threaded numpy; every grid point has its own random stream, so this changes nothing)
        pool = ProcessPoolExecutor(max_workers=1)
        pending = pool.submit(hardware_job, scenario, True)
        say(f"hardware scenario {scenario.name} running in a second process")
    if not only_scenario:
        cost = FlatCostModel(draft_cost_ratio=cfg.draft_cost)
        say(f"reference study: {len(cfg.batch_sizes) * len(cfg.gammas) * len(cfg.quality_modes) * len(cfg.serving_modes)} "
            f"grid points ({cfg.verification} verification)")
        sweep = _Sweep(cfg, cost)
        reference = run_grid(cfg, cost, progress=_progress_printer(args.quiet), sweep=sweep)
        other = "lockstep" if cfg.verification == "ragged" else "ragged"
        say(f"companion sweep: {other} verification for the summary's comparison")
        comparison = pd.concat([reference[reference.gamma.isin(comparison_config(cfg).gammas)],
                                run_grid(comparison_config(cfg), cost, verification=other, sweep=sweep)],
                               ignore_index=True)
    hardware = None
    if scenario is not None:
        hardware = pending.result() if pending else hardware_job(scenario, args.quiet, workers=os.cpu_count() or 1)
    if pool:
        pool.shutdown()
    paths = analysis.write_outputs(out, cfg, reference, comparison, cost, hardware)
    say(f"wrote {', '.join(paths)} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
