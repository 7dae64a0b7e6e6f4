"""`--kernels measured|roofline` for every command that builds a HardwareCostModel.

with_kernels(cost, mode) returns the cost model with the measured GEMMs of its engine profile on
its GPU (src/kernels/pass_gemms.py) set as `kernels` and its measured decode attention
(src/kernels/pass_attention.py, where the table has the target's head shape) as
`attention_kernels`, or the cost model unchanged:
- mode "roofline": unchanged (the roofline, bit for bit);
- mode None: DEFAULT_KERNELS (AUTO);
- mode AUTO: measured where table_source(gpu, engine) finds tables, else
  unchanged, with one `note: --kernels: ...` line on stderr per reason and process (a study
  builds a cost model per deployment; the note is printed once). Profiles no engine's tables
  price (ideal, pytorch-*, calibrated ones) keep the roofline without a note;
- mode "measured": measured; where no tables exist, ConfigError("--kernels", ...) (exit 2).
The cost model is built in src/costmodel/ (below this layer), so the commands call with_kernels
after HardwareCostModel.from_presets rather than from_presets itself (tests/test_layers.py).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import replace

from src.errors import ConfigError
from src.kernels.sources import table_source, tables_of

KERNEL_CHOICES = ("measured", "roofline")
AUTO = "auto"  # measured where table_source finds tables, else the roofline (with a note)
# what a command without --kernels prices with: measured where the tables exist (issue 23)
DEFAULT_KERNELS = AUTO
_NOTED: set[str] = set()  # the notes already printed by this process
_HELD: list[list[str]] = []  # notes held by deferred_notes(), innermost last


def check_kernels_mode(mode) -> str | None:
    """mode as given (None, AUTO, "measured", "roofline"); ConfigError otherwise."""
    if mode is not None and mode != AUTO and mode not in KERNEL_CHOICES:
        raise ConfigError("--kernels", f"unknown '{mode}'; allowed: {', '.join(KERNEL_CHOICES)}")
    return mode


def note_once(note: str) -> None:
    if note and note not in _NOTED:
        _NOTED.add(note)
        if _HELD:
            _HELD[-1].append(note)
        else:
            print(note, file=sys.stderr)


@contextmanager
def deferred_notes():
    """Hold this process's notes while a command checks its input (plan's fit checks): printed
    when the block ends normally, dropped (and printable again) when it raises, so that bad
    input stays one line."""
    held: list[str] = []
    _HELD.append(held)
    try:
        yield
    except BaseException:
        _NOTED.difference_update(held)
        raise
    finally:
        _HELD.pop()
    for note in held:  # already in _NOTED: hand on to an outer hold, or print
        (_HELD[-1].append(note) if _HELD else print(note, file=sys.stderr))


def check_measured(gpu_id: str, engine_names, mode: str | None) -> None:
    """Before a command runs: with --kernels measured, at least one of its engine profiles must
    have tables on the GPU (a study of ideal + vllm-v1 prices vllm-v1 from them and ideal from
    the roofline); ConfigError("--kernels", ...) otherwise (exit 2, nothing written)."""
    if check_kernels_mode(mode) != "measured":
        return
    whys = [table_source(gpu_id, e)[1] for e in engine_names]
    if whys and all(whys):
        raise ConfigError("--kernels", f"measured: {whys[-1]}; allowed: roofline")


def measured_kernels(gpu, profile, mode: str | None, strict: bool = True):
    """(MeasuredKernels of engine profile `profile` on GPU preset `gpu`, "") or (None, the
    stderr note, "" where none is due) under `mode` (module docstring); ConfigError where mode
    "measured" (and strict) finds no tables. The caller prints the note."""
    mode = check_kernels_mode(mode) or DEFAULT_KERNELS
    if mode == "roofline":
        return None, ""
    src, why = tables_of(gpu, profile)
    if src is None and not (profile.kernel_tables and gpu.kernel_system):
        why = table_source(gpu.gpu_id, profile.name)[1] or why  # lists those with tables
    if src is None:
        if mode == "measured" and strict:
            raise ConfigError("--kernels", f"measured: {why}; allowed: roofline")
        # the default stays quiet for profiles no engine's tables price (ideal, pytorch-*)
        quiet = mode != "measured" and not profile.kernel_tables
        return None, "" if quiet else f"note: --kernels: {why}; priced from the roofline"
    from src.kernels.measured import MeasuredKernels
    from src.kernels.pricing import gpu_peaks

    return MeasuredKernels(src, gpu_peaks(gpu)), ""


def with_kernels(cost, mode: str | None = None, strict: bool = True):
    """cost (a HardwareCostModel) priced as `mode` says (module docstring); strict False: an
    engine profile without tables keeps the roofline under "measured" too (with the note; the
    command has run check_measured over all its profiles)."""
    mode = check_kernels_mode(mode)
    if (mode or DEFAULT_KERNELS) == "roofline":
        return cost if cost.kernels is None and cost.attention_kernels is None else replace(
            cost, kernels=None, attention_kernels=None)
    kernels, note = measured_kernels(cost.gpu, cost.engine, mode, strict)
    if kernels is None:
        note_once(note)
        return cost
    from src.kernels.pass_attention import PassAttention
    from src.kernels.pass_gemms import PassGemms
    from src.kernels.pass_moe import PassMoe

    moe = PassMoe(kernels, cost._target_c, cost.target, cost.tp, cost.ep, cost.gpu, cost.params)
    if moe.why and cost.target.n_routed_experts and mode == "measured":
        note_once(f"note: --kernels: {cost.target.model_id}: {moe.why}")
    gemms = PassGemms(kernels, cost._target_c, cost.target, cost.tp, cost.gpu, cost.params,
                      ep=cost.ep, moe=moe, shared_overlap=cost.engine.shared_experts_overlap)
    # decode attention depends on the head shape and the KV dtype, not on the weights' format:
    # an FP8/FP4 or MoE target with full GQA attention takes it from the table too
    attention = PassAttention(kernels, cost._target_c, cost.target, cost.tp, cost.gpu,
                              cost.params)
    attention = attention if attention.applies else None
    if not gemms.applies:
        why = (f"{cost.target.model_id}: measured GEMMs price dense BF16 and MoE decoders so "
               "far")
        if mode == "measured" and strict:
            raise ConfigError("--kernels", f"measured: {why}; allowed: roofline")
        if mode == "measured":  # the default stays quiet: summaries say which layers are measured
            note_once(f"note: --kernels: {why}; priced from the roofline")
        return cost if attention is None else replace(cost, attention_kernels=attention)
    return replace(cost, kernels=gemms, attention_kernels=attention)


def measured_where() -> str:
    """'<profiles> on <GPUs>': the engine profiles with kernel_tables and the GPU presets with a
    kernel_system (the built-in presets), for help texts."""
    from src.costmodel.engines import load_engine_profiles
    from src.costmodel.presets import load_presets

    engines = sorted(n for n, p in load_engine_profiles().items() if p.kernel_tables)
    gpus = sorted(g for g, s in load_presets().gpus.items() if s.kernel_system)
    return f"{', '.join(engines)} on {', '.join(gpus)}"


def kernels_help() -> str:
    """--kernels' help."""
    return ("price the target's GEMMs and decode attention from the engine's measured kernels "
            f"(NVIDIA AIConfigurator's tables, src/kernels/: {measured_where()}, where the GPU's "
            "system holds the profile's version) or from the roofline (default: measured where "
            "the engine profile has tables on the GPU, else the roofline)")


def add_kernels_argument(parser) -> None:
    """--kernels measured|roofline on a command that builds cost models from a scenario."""
    parser.add_argument("--kernels", choices=KERNEL_CHOICES, default=None, help=kernels_help())
