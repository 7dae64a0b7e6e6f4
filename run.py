"""Run the batched speculative decoding study: sweep the grid, write results/ and plots/.

    python run.py                      # the reference study (7 batch sizes x 7 gammas x 4 x 2)
    python run.py --help               # every option
    python run.py step-time --help     # forward-pass time calculator (hardware cost model)

Parse the command line (src/cli.py); sweep the grid (src/sweep.py: config, workload, acceptance,
baseline, speculative, metrics) under the flat cost model, plus the companion sweep under the
other verification policy; run the hardware scenario (src/hardware/study.py); hand the rows to
analysis, which writes every output.
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import pandas as pd

from src import analysis, cli
from src.config import ConfigError
from src.costmodel import FlatCostModel
from src.hardware.study import hardware_job
from src.sweep import Sweep, comparison_config, progress_printer, run_grid


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    subcommand = cli.subcommand(argv)
    if subcommand is not None:
        return subcommand(argv[1:])
    try:
        plan = cli.parse(argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for line in plan.measured_acceptance:  # what was derived from measurements, for the user to check
        print(line)
    start = time.perf_counter()
    say = (lambda msg: None) if plan.quiet else (lambda msg: print(msg, file=sys.stderr))
    cfg, scenario = plan.cfg, plan.scenario
    reference = comparison = cost = pool = pending = None
    if scenario is not None and plan.reference and (os.cpu_count() or 1) > 1:
        # the hardware scenario runs in a second process beside the reference study (both are
        # single-threaded numpy; every grid point has its own random stream, so this changes nothing)
        pool = ProcessPoolExecutor(max_workers=1)
        pending = pool.submit(hardware_job, scenario, True)
        say(f"hardware scenario {scenario.name} running in a second process")
    if plan.reference:
        cost = FlatCostModel(draft_cost_ratio=cfg.draft_cost)
        say(f"reference study: {len(cfg.batch_sizes) * len(cfg.gammas) * len(cfg.quality_modes) * len(cfg.serving_modes)} "
            f"grid points ({cfg.verification} verification)")
        sweep = Sweep(cfg, cost)
        reference = run_grid(cfg, cost, progress=progress_printer(plan.quiet), sweep=sweep)
        other = "lockstep" if cfg.verification == "ragged" else "ragged"
        say(f"companion sweep: {other} verification for the summary's comparison")
        comparison = pd.concat([reference[reference.gamma.isin(comparison_config(cfg).gammas)],
                                run_grid(comparison_config(cfg), cost, verification=other, sweep=sweep)],
                               ignore_index=True)
    hardware = None
    if scenario is not None:
        hardware = pending.result() if pending else hardware_job(scenario, plan.quiet, workers=os.cpu_count() or 1)
    if pool:
        pool.shutdown()
    paths = analysis.write_outputs(plan.out, cfg, reference, comparison, cost, hardware)
    say(f"wrote {', '.join(paths)} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
