"""`--kernels measured|roofline` for every command that builds a HardwareCostModel.

with_kernels(cost, mode) returns the cost model with the measured GEMMs of its engine profile on
its GPU (src/kernels/pass_gemms.py) set as `kernels`, or the cost model unchanged:
- mode "roofline": unchanged (the roofline, bit for bit);
- mode None (the default): measured where table_source(gpu, engine) finds tables, else
  unchanged, with one `note: --kernels: ...` line on stderr per reason and process (a study
  builds a cost model per deployment; the note is printed once). Profiles no engine's tables
  price (ideal, pytorch-*, calibrated ones) keep the roofline without a note;
- mode "measured": measured; where no tables exist, ConfigError("--kernels", ...) (exit 2).
The cost model is built in src/costmodel/ (below this layer), so the commands call with_kernels
after HardwareCostModel.from_presets rather than from_presets itself (tests/test_layers.py).
"""
from __future__ import annotations

import sys
from dataclasses import replace

from src.errors import ConfigError
from src.kernels.sources import table_source

KERNEL_CHOICES = ("measured", "roofline")
_NOTED: set[str] = set()  # the notes already printed by this process


def check_kernels_mode(mode) -> str | None:
    """mode as given (None, "measured", "roofline"); ConfigError otherwise."""
    if mode is not None and mode not in KERNEL_CHOICES:
        raise ConfigError("--kernels", f"unknown '{mode}'; allowed: {', '.join(KERNEL_CHOICES)}")
    return mode


def note_once(note: str) -> None:
    if note and note not in _NOTED:
        _NOTED.add(note)
        print(note, file=sys.stderr)


def with_kernels(cost, mode: str | None = None):
    """cost (a HardwareCostModel) priced as `mode` says (module docstring)."""
    mode = check_kernels_mode(mode)
    if mode == "roofline":
        return cost if cost.kernels is None else replace(cost, kernels=None)
    src, why = table_source(cost.gpu.gpu_id, cost.engine.name)
    if src is None:
        if mode == "measured":
            raise ConfigError("--kernels", f"measured: {why}; allowed: roofline")
        if not why.startswith("engine profile"):  # a measured engine on a GPU without tables
            note_once(f"note: --kernels: {why}; priced from the roofline")
        return cost
    from src.kernels.measured import MeasuredKernels
    from src.kernels.pass_gemms import PassGemms
    from src.kernels.pricing import gpu_peaks

    gemms = PassGemms(MeasuredKernels(src, gpu_peaks(cost.gpu)), cost._target_c, cost.target,
                      cost.tp, cost.gpu, cost.params)
    if not gemms.applies:
        why = (f"{cost.target.model_id}: measured GEMMs price dense BF16 decoders so far")
        if mode == "measured":
            raise ConfigError("--kernels", f"measured: {why}; allowed: roofline")
        note_once(f"note: --kernels: {why}; priced from the roofline")
        return cost
    return replace(cost, kernels=gemms)
