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

from src import analysis
from src.config import (
    ConfigError, OneLineArgumentParser, StudyConfig, alpha_mode_label, build_config, check_alpha, load_toml,
)
from src.costmodel import FlatCostModel
from src.hardware.scenario import Scenario, check_memory, default_hardware_scenario, load_scenario
from src.hardware.study import hardware_job
from src.sweep import _Sweep, comparison_config, progress_printer, run_grid

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
            raise ConfigError(OPTION_FIELDS[e.field_name], e.allowed) from None
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
            raise ConfigError("--batch-sizes", f"{e.allowed}. The default run also simulates the "
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
        reference = run_grid(cfg, cost, progress=progress_printer(args.quiet), sweep=sweep)
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
