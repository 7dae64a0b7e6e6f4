"""Run the batched speculative decoding study: sweep the grid, write results/ and plots/.

    python run.py                      # the reference study (7 batch sizes x 7 gammas x 4 x 2)
    python run.py --help               # every option
    python run.py step-time --help     # forward-pass time calculator (hardware cost model)

Parse the command line (src/cli.py); sweep the grid (src/sweep.py: config, workload, acceptance,
baseline, speculative, metrics) under the flat cost model, plus the companion sweep under the
other verification policy; run the hardware scenario (src/hardware/study.py); hand the rows to
analysis, which renders every output, and replace the previous outputs as one set (src/outputs.py).

Bad input is found before anything heavy is imported or simulated. Ctrl-C (exit 130) and SIGTERM
(exit 143) stop the run with one line, end its worker processes and leave the previous outputs.
A reader that stops early (`python run.py step-time ... | head`) ends any command quietly, exit 0:
the closed stream is pointed at os.devnull, nothing more is printed, no traceback.
"""
from __future__ import annotations

import os
import select
import signal
import sys
import time

from src import cli, outputs
from src.config import ConfigError
from src.interrupts import redelivered

EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


class Terminated(BaseException):
    """SIGTERM, raised in the main thread like KeyboardInterrupt is for SIGINT."""


class WriteFailed(Exception):
    """Writing the outputs failed after the simulation (disk full, permissions changed)."""


def grid_points(cfg) -> int:
    from src.sweep import draft_shapes
    return (len(cfg.batch_sizes) * len(draft_shapes(cfg)) * len(cfg.quality_modes)
            * len(cfg.serving_modes))


def _raise_terminated(signum, frame):
    raise Terminated()


def study(plan: cli.RunPlan, state: dict, executor=None) -> None:
    """Simulate what the plan asks for and publish the outputs; state["published"] turns True once
    the new outputs are final."""
    # heavy imports only now that the input is known to be good
    import pandas as pd

    # step_engine imports numba: here, once, before the worker forks (not again in the worker)
    from src import analysis, step_engine  # noqa: F401
    from src.costmodel import FlatCostModel
    from src.hardware.study import hardware_job
    from src.processes import Background, stderr_line
    from src.sweep import Sweep, comparison_config, progress_printer, run_grid
    from src.trees.report import split_trees

    start = time.perf_counter()
    say = (lambda msg: None) if plan.quiet else stderr_line
    cfg, scenario = plan.cfg, plan.scenario
    reference = comparison = cost = background = rendered = reference_trees = None
    from src.serving import compile_step_loop_once
    # before the second process and any worker start (forked from here, they inherit it)
    compile_step_loop_once(say, load=executor is None)
    try:
        if (scenario is not None and plan.reference and (os.cpu_count() or 1) > 1
                and executor is None):
            # the hardware scenario runs in a second process beside the reference study (both are
            # single-threaded numpy; every grid point has its own random stream, so this changes
            # nothing)
            background = Background(hardware_job, scenario, plan.quiet, 1, plan.plots)
            say(f"hardware scenario {scenario.name}: running in a second process")
        if plan.reference:
            cost = FlatCostModel(draft_cost_ratio=cfg.draft_cost)
            say(f"reference study: {grid_points(cfg)} grid points ({cfg.verification} "
                "verification)")
            sweep = Sweep(cfg, cost)
            reference = run_grid(cfg, cost, progress=progress_printer(plan.quiet, "reference"),
                                 sweep=sweep, executor=executor)
            reference, reference_trees = split_trees(reference)  # trees: src/trees/report.py
            other = "lockstep" if cfg.verification == "ragged" else "ragged"
            companion = comparison_config(cfg)
            say(f"companion sweep: {other} verification at gamma "
                f"{', '.join(map(str, companion.gammas))}, "
                f"{grid_points(companion)} grid points, for the summary's comparison")
            comparison = pd.concat([reference[reference.gamma.isin(companion.gammas)],
                                    run_grid(companion, cost, verification=other, sweep=sweep,
                                             executor=executor,
                                             progress=progress_printer(plan.quiet,
                                                                       f"companion ({other})"))],
                                   ignore_index=True)
            # the reference plots and summary now, while the hardware scenario still runs
            rendered = analysis.reference_part(cfg, reference, comparison, cost, plan.quiet,
                                               plots=plan.plots)
        hardware = None
        if scenario is not None:
            if background is not None:
                say(f"waiting for the hardware scenario {scenario.name}")
                hardware = background.result()
            else:
                hardware = hardware_job(scenario, plan.quiet, workers=os.cpu_count() or 1,
                                        plots=plan.plots, executor=executor)
    finally:
        if background is not None:
            background.kill()
    say("writing outputs: results and summary")
    try:
        with outputs.locked(plan.out, stderr_line):  # the kept files are read under the lock
            paths = analysis.write_outputs(plan.out, cfg, reference, comparison, cost, hardware,
                                           after_commit=lambda: state.update(published=True),
                                           quiet=plan.quiet, rendered=rendered, plots=plan.plots,
                                           trees=reference_trees)
    except OSError as e:
        raise WriteFailed(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}") from None
    where = (f"{plan.out}/results and {plan.out}/plots" if plan.plots
             else f"{plan.out}/results (no plots: --no-plots)")
    own = [p for p in paths
           if analysis.study_owns(os.path.relpath(p, plan.out).replace(os.sep, "/"))]
    kept = (f"; kept {len(paths) - len(own)} files of other commands there" if len(own) < len(paths)
            else "")
    say(f"wrote {len(own)} files in {where}{kept} in {time.perf_counter() - start:.1f} s")


def _reader_gone(stream) -> bool:
    """Whether `stream` is a pipe whose reading end has closed (poll flags its end POLLERR)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a captured or closed stream: not a pipe
        return False
    if not hasattr(select, "poll"):  # no poll (Windows): take the error as the closed pipe's
        return True
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _silence_closed_streams() -> bool:
    """After a BrokenPipeError: point stdout and stderr, where their reader has gone, at
    os.devnull, so that what is still buffered and the exit flush go nowhere, without a
    traceback (the idiom of Python's signal docs, 'Note on SIGPIPE'). False where neither stream
    is a closed pipe: the error then came from elsewhere and is not swallowed."""
    gone = [s for s in (sys.stdout, sys.stderr) if _reader_gone(s)]
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in gone:
            os.dup2(devnull, stream.fileno())
        os.close(devnull)
    return bool(gone)


def main(argv: list[str] | None = None) -> int:
    """The study or a subcommand (`_main`); exit 0 without output where the reader of stdout
    stopped early, e.g. `| head`."""
    try:
        try:
            # a Ctrl-C or SIGTERM whose exception Python swallows (a handler run inside a ctypes
            # callback: numba's first load of a cached function) is sent again (src/interrupts.py)
            with redelivered({KeyboardInterrupt: signal.SIGINT, Terminated: signal.SIGTERM}):
                code = _main(argv)
        except SystemExit:  # argparse's --help and usage errors
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a pipe is block-buffered: its last write fails here, not at exit
        return code
    except BrokenPipeError:
        if not _silence_closed_streams():
            raise
        return 0


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    previous_term = signal.signal(signal.SIGTERM, _raise_terminated)
    state = {"published": False}
    try:
        subcommand = cli.subcommand(argv)
        if subcommand is not None:
            return subcommand(argv[1:])
        try:
            plan = cli.parse(argv)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
        # what was derived from measurements, for the user to check
        for line in plan.measured_acceptance:
            print(line)
        from src.executor import open_executor
        try:
            executor = open_executor(plan.dask) if plan.dask else None
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
        try:
            study(plan, state, executor)
        except WriteFailed as e:
            print(f"error: --out: could not write the outputs ({e}); previous outputs left as they "
                  "were", file=sys.stderr)
            return EXIT_USAGE
        finally:
            if executor is not None:
                executor.close()
        return 0
    except (KeyboardInterrupt, Terminated) as e:
        what = "interrupted" if isinstance(e, KeyboardInterrupt) else "terminated"
        outcome = ("the new outputs were already written" if state["published"]
                   else "previous outputs left as they were")
        newline = "\n" if sys.stderr.isatty() else ""  # past the terminal's ^C
        sys.stderr.write(f"{newline}{what}; {outcome}\n")  # one write: never cut or interleaved
        return EXIT_INTERRUPTED if isinstance(e, KeyboardInterrupt) else EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous_term)


if __name__ == "__main__":
    sys.exit(main())
