"""The command line of `python run.py`: options, subcommands, and what a run is asked to do.

The study's options are built from the StudyConfig fields marked `option=True` (src/config.py):
each field's help and allowed values become its --help line, so a new option is one edit there.
Subcommands (`python run.py NAME ...`) dispatch through SUBCOMMANDS to their module's main(argv).
Every bad input raises ConfigError naming the option, before anything is simulated.
"""
from __future__ import annotations

import argparse
import importlib
import os
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Callable

from src import outputs
from src.acceptance_data import options as acceptance_options
from src.config import (
    ConfigError,
    OneLineArgumentParser,
    StudyConfig,
    alpha_mode_label,
    build_config,
    check_alpha,
    load_toml,
)
from src.costmodel.cudagraph_sizes import add_capture_size_argument, capture_size_option
from src.hardware.scenario import (
    Scenario,
    check_memory,
    check_serve_only,
    check_tree_engines,
    default_hardware_scenario,
    load_scenario,
    select_engine_profiles,
)
from src.kernels.costmodel import add_kernels_argument, check_measured

if TYPE_CHECKING:
    from src.dask_address import DaskAddress

# name -> (module whose main(argv) runs it, one line for --help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "step-time": ("src.stepcalc", "forward-pass times of real GPUs and models"),
    "serve": ("src.disagg.serve_cli",
              "serving under load: request rates, latency percentiles, policies"),
    "recommend": ("src.disagg.recommend", "whether to speculate, with vLLM, SGLang and "
                  "TensorRT-LLM settings"),
    "plan": ("src.plan.cli", "capacity planning: SLO capacity and cost of many deployments"),
    "measure": ("src.measure.cli", "time real forward steps on your GPU (needs PyTorch)"),
    "calibrate": ("src.calibration.command", "fit the cost model to measured step times of a GPU"),
    "measure-moe": ("src.measure.moe_cli", "time MoE layers with set routing skew (needs PyTorch)"),
    "calibrate-moe": ("src.calibration.moe_command", "fit per-expert GEMM terms to MoE rows"),
    "moe-study": ("src.hardware.moe_cli", "MoE targets against dense twins; MoE validation"),
    "silicon-validate": ("src.validation.silicon_cli",
                         "greedy serving against AIConfigurator's measured deployments"),
    "silicon-validate-disagg": ("src.disagg.silicon_cli",
                                "disaggregated prefill/decode against AIConfigurator's rows"),
}

DASK_HELP = ("run the work on Dask: local:N (a LocalCluster of N worker processes on 127.0.0.1) "
             "or a scheduler's address, e.g. tcp://10.0.0.5:8786 (default: "
             "$DASK_SCHEDULER_ADDRESS, else local processes); same outputs, byte for byte")

# StudyConfig field -> its command-line option
OPTION_FIELDS: dict[str, str] = {f.name: "--" + f.name.replace("_", "-")
                                 for f in fields(StudyConfig) if f.metadata.get("option")}


def subcommand(argv: list[str]) -> Callable[[list[str]], int] | None:
    """The main(argv) of the subcommand argv[0] names, or None for the study itself."""
    if argv and argv[0] in SUBCOMMANDS:
        return importlib.import_module(SUBCOMMANDS[argv[0]][0]).main
    return None


def _default_text(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def make_parser() -> argparse.ArgumentParser:
    defaults = StudyConfig()
    subcommands = "; ".join(f"'python run.py {name} --help': {text}"
                            for name, (_, text) in SUBCOMMANDS.items())
    p = OneLineArgumentParser(
        prog="python run.py",
        description="Simulate speculative vs greedy decoding over a grid of batch sizes, gammas, "
        "draft-quality "
                    "modes and serving modes; write results/results.csv, results/summary.txt and "
                    "plots/.",
        epilog=f"Subcommands: {subcommands}. Lists are comma-separated, e.g. --gammas 2,4,8. "
        "Options "
               "override --config, which overrides defaults.")
    for f in fields(StudyConfig):
        if f.name in OPTION_FIELDS:
            default = _default_text(getattr(defaults, f.name))
            p.add_argument(OPTION_FIELDS[f.name], dest=f.name,
                           help=f"{f.metadata['help']}; {f.metadata['rule'].allowed} (default "
                           f"{default})")
    p.add_argument("--alpha",
                   help="run a single point-mass quality mode with this acceptance probability, "
                   "0.001..0.999")
    p.add_argument("--config",
                   help="TOML file setting any configuration field (see configs/example.toml)")
    p.add_argument("--scenario",
                   help="'reference' runs only the flat-cost reference study; a scenario TOML file "
                                      "(configs/scenarios/) runs only that hardware deployment, "
                                      "into runs/NAME "
                                      "unless --out is given. Default: the reference study and the "
                                      "default "
                                      "hardware scenario (H100, Llama-3.1-8B + Llama-3.2-1B).")
    p.add_argument("--engine-profiles",
                   help="run only these of the scenario's engine profiles (scenario."
                        "engine_profiles), comma-separated, the first the default; e.g. drop "
                        "vllm-v1, which verifies chains only, to run --trees")
    add_kernels_argument(p)
    add_capture_size_argument(p)
    p.add_argument("--out",
                   help="output folder; each run replaces OUT/results and OUT/plots as a whole "
                   "(default: "
                        "the current folder, or runs/NAME for a scenario file)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--dask", help=DASK_HELP)
    p.add_argument("--no-plots", action="store_true",
                   help="write results/ only, without drawing the plots (they take about half "
                        "the run's CPU); plots an earlier run of the study left in OUT/plots are "
                        "removed, so no plot shows other numbers than results/")
    acceptance_options.add_arguments(p)
    return p


def config_from_args(args: argparse.Namespace, measured: dict | None = None) -> StudyConfig:
    """Defaults, then --config, then options; raises ConfigError naming the file key or option.
    `measured`: quality modes from the measured-acceptance options (src/acceptance_data/options.py),
    run instead of the default modes unless --quality-modes names the modes to run."""
    cfg = StudyConfig()
    if args.config:
        raw = load_toml(args.config)
        try:
            cfg = build_config(raw, cfg, toml=True)
        except ConfigError as e:
            raise ConfigError(f"--config {args.config}", str(e)) from None
    overrides = {f: getattr(args, f) for f in OPTION_FIELDS if getattr(args, f) is not None}
    if measured:
        cfg = replace(cfg, alpha_modes={**cfg.alpha_modes, **measured})
        if args.quality_modes is None:
            overrides["quality_modes"] = list(measured)
    try:
        if args.alpha is not None:
            if args.quality_modes is not None:
                raise ConfigError("--alpha", "use either --alpha or --quality-modes, not both")
            a = check_alpha("--alpha", args.alpha)
            overrides["alpha_modes"] = {alpha_mode_label(a): {"kind": "point", "value": a}}
            overrides["quality_modes"] = [*(measured or {}), alpha_mode_label(a)]
        return build_config(overrides, cfg)
    except ConfigError as e:
        if e.field_name in OPTION_FIELDS:
            raise ConfigError(OPTION_FIELDS[e.field_name], e.allowed) from None
        raise


def scenario_from_args(args: argparse.Namespace, cfg: StudyConfig,
                       measured: dict | None = None) -> Scenario | None:
    """The hardware scenario to run (None for --scenario reference), with the command line's grid
    options applied over the scenario's own [study] table."""
    if args.scenario == "reference":
        if args.engine_profiles is not None:
            raise ConfigError("--engine-profiles", "the reference study (--scenario reference) "
                                                   "has no engine profiles; give a scenario file")
        return None
    try:
        scenario = (default_hardware_scenario() if args.scenario is None
                    else load_scenario(args.scenario))
    except ConfigError as e:
        if e.field_name == "--scenario":  # the file itself could not be read
            raise
        raise ConfigError(f"--scenario {args.scenario}", str(e)) from None
    try:
        check_serve_only(scenario, "this command")
    except ConfigError as e:
        raise ConfigError(f"--scenario {args.scenario}", str(e)) from None
    if args.engine_profiles is not None:
        scenario = select_engine_profiles(scenario, args.engine_profiles)
    if args.kernels is not None:
        check_measured(scenario.gpu_id, scenario.engine_profiles, args.kernels)
        scenario = replace(scenario, kernels=args.kernels)
    scenario = replace(scenario, max_cudagraph_capture_size=capture_size_option(
        args, scenario.engine_profiles, scenario.preset_paths))
    # fields set on the command line or in --config apply to the scenario's grid too; draft_cost
    # belongs to the flat cost model and does not, so a scenario file alone refuses it
    in_config = set(load_toml(args.config)) if args.config else set()
    if args.scenario is not None:
        ignored = ("draft cost of the flat cost model, which only the reference study uses; "
                   f"--scenario {args.scenario} takes its step times from the GPU, models and "
                   "engine profiles it names")
        if args.draft_cost is not None:
            raise ConfigError("--draft-cost", f"not used: it sets the {ignored}")
        if "draft_cost" in in_config:
            raise ConfigError(f"--config {args.config}",
                              f"draft_cost is not used: it is the {ignored}")
    explicit = set(in_config)
    explicit |= {f for f in OPTION_FIELDS if getattr(args, f) is not None}
    if args.alpha is not None or measured:
        explicit |= {"alpha_modes", "quality_modes"}
    if explicit & {"alpha_modes", "quality_modes"}:
        explicit |= {"alpha_modes", "quality_modes"}
    overrides = {f: getattr(cfg, f) for f in sorted(explicit - {"draft_cost"})}
    if overrides:
        scenario = replace(scenario, study=replace(scenario.study, **overrides))
        if "trees" in overrides:
            try:
                check_tree_engines(scenario, "--trees" if args.trees is not None
                                   else f"--config {args.config}: trees")
            except ConfigError as e:
                from src.treesim.costs import TreeEngine, tree_engines
                known = tree_engines()
                able = [n for n in scenario.engine_profiles
                        if known.get(n, TreeEngine()).verifies_trees]
                if not able or len(able) == len(scenario.engine_profiles):
                    raise  # no profile to keep, or the refusal is not about a profile
                raise ConfigError(e.field_name, f"{e.allowed}; or run the scenario's others: "
                                                f"--engine-profiles {','.join(able)}") from None
        try:
            check_memory(scenario)
        except ConfigError as e:
            if args.scenario is not None:
                raise
            raise ConfigError("--batch-sizes", f"{e.allowed}. The default run also simulates the "
                                               f"hardware scenario {scenario.name}; use --scenario "
                                               "reference to run "
                                               "the flat-cost study alone") from None
    return scenario


@dataclass(frozen=True)
class RunPlan:
    """What one `python run.py` is asked to do, validated."""

    cfg: StudyConfig  # the reference study's grid (and the options a scenario takes over)
    scenario: Scenario | None  # the hardware scenario to run, or None
    reference: bool  # run the flat-cost reference study
    out: str  # output folder: OUT/results, OUT/plots
    quiet: bool  # no progress on stderr
    plots: bool = True  # draw the plots (--no-plots: results/ only)
    measured_acceptance: tuple[str, ...] = ()  # what the measured-acceptance options derived
    dask: DaskAddress | None = None  # --dask or $DASK_SCHEDULER_ADDRESS, checked; None = local


def run_sibling_vector(args: argparse.Namespace, cfg: StudyConfig,
                       scenario: Scenario | None) -> tuple | None:
    """The sibling vector a tree-shape --shape-measured fit must use where the run's is not the
    default (None otherwise); ConfigError where the reference study and the scenario differ."""
    from src.treeshape.shape import TreeShapeError, parse_shape
    from src.treeshape.siblings import SEQUOIA_VECTOR
    if args.acceptance_length is None or args.shape_measured is None:
        return None
    try:
        if parse_shape(args.shape_measured).is_chain:
            return None
    except TreeShapeError:
        return None  # measured_acceptance has named it already
    only_scenario = args.scenario not in (None, "reference")
    vectors = {tuple(v) for v in ([] if only_scenario else [cfg.sibling_vector])
               + ([scenario.study.sibling_vector] if scenario is not None else [])}
    if len(vectors) > 1:
        raise ConfigError("--shape-measured", "the reference study and the scenario use different "
                                              "sibling_vector values; the tree fit needs one")
    vector = vectors.pop() if vectors else tuple(SEQUOIA_VECTOR)
    return None if vector == tuple(SEQUOIA_VECTOR) else vector


def check_temperature_acceptance(args: argparse.Namespace, cfg: StudyConfig,
                                 scenario: Scenario | None, measured: bool) -> None:
    """At temperature > 0 (--temperature, or a --config / scenario file's) the acceptance must be
    the user's at that temperature (src/sampling_acceptance.py); ConfigError otherwise."""
    from src.sampling_acceptance import check_study, file_states_temperature
    temperature = max(cfg.temperature, scenario.study.temperature if scenario else 0.0)
    if temperature <= 0:
        return
    files = [f for f in (args.config, args.scenario) if f not in (None, "reference")]
    check_study(temperature, args.alpha is not None or measured
                or any(file_states_temperature(load_toml(f), temperature) for f in files))


def parse(argv: list[str]) -> RunPlan:
    """The command line as a RunPlan; ConfigError naming the option on bad input (argparse's own
    usage errors exit 2 with one line)."""
    args = make_parser().parse_args(argv)
    measured = acceptance_options.measured_acceptance(args)
    cfg = config_from_args(args, measured.modes)
    scenario = scenario_from_args(args, cfg, measured.modes)
    vector = run_sibling_vector(args, cfg, scenario)
    if vector is not None:  # a tree's length is fitted under the vector the run simulates
        measured = acceptance_options.measured_acceptance(args, vector)
        cfg = config_from_args(args, measured.modes)
        scenario = scenario_from_args(args, cfg, measured.modes)
    only_scenario = args.scenario not in (None, "reference")
    check_temperature_acceptance(args, cfg, scenario, bool(measured.modes))
    out = args.out if args.out is not None else (os.path.join("runs", scenario.name)
                                                 if only_scenario else ".")
    from src.executor import dask_option
    dask = dask_option(args.dask)
    outputs.prepare(out)
    return RunPlan(dask=dask, cfg=cfg, scenario=scenario, reference=not only_scenario, out=out,
                   quiet=args.quiet, plots=not args.no_plots,
                   measured_acceptance=measured.lines)
