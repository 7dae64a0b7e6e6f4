"""GEMM efficiencies re-fitted to an engine's measured kernels, per GPU (issue 23).

src/presets/kernel_efficiency.toml (written by `python scripts/fit_kernel_efficiency.py`, from
NVIDIA AIConfigurator's measured BF16 GEMM rows; design.md, "Kernel efficiencies re-fitted to
measured GEMMs") holds, per GPU preset, the roofline's bandwidth efficiency, compute efficiency
and p fitted to one engine's GEMM table. An engine profile with gemm_efficiency_source =
"tables" prices its passes on such a GPU with them: `engine_gpu` returns the GPU preset with
those three values, and without the small-GEMM / matrix-vector bandwidths and the wave tile of a
`run.py calibrate` fit (the refit prices every GEMM with the one p-norm it was fitted with).
Profiles with "preset" (ideal, pytorch-*, ...) and GPUs the file does not cover keep the preset
as it is.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from src.config import read_toml
from src.costmodel.engines import EngineProfile
from src.costmodel.presets import PRESETS_DIR, CostModelInputError, GpuSpec

KERNEL_EFFICIENCY_FILE = PRESETS_DIR / "kernel_efficiency.toml"
FITTED_FIELDS = ("memory_bandwidth_efficiency_fraction", "compute_efficiency_fraction",
                 "roofline_sharpness_p")
# the GpuSpec fields of a calibration fit that the refit's single p-norm replaces (unset)
CLEARED_FIELDS = ("small_gemm_bandwidth_efficiency_fraction",
                  "gemv_bandwidth_efficiency_fraction", "gemm_wave_tile")


@lru_cache(maxsize=4)
def table_efficiencies(path: Path = KERNEL_EFFICIENCY_FILE) -> dict[str, dict[str, float]]:
    """GPU id -> {FITTED_FIELDS: value} of the file's [kernel_efficiency."<gpu>"] tables ({}
    where the file is absent)."""
    if not path.is_file():
        return {}
    data = read_toml(path, "kernel_efficiency", CostModelInputError)
    out = {}
    for gpu_id, raw in data.get("kernel_efficiency", {}).items():
        try:
            values = {f: float(raw[f]) for f in FITTED_FIELDS}
        except (KeyError, TypeError, ValueError):
            raise CostModelInputError(f"kernel_efficiency.{gpu_id}",
                                      f"needs numbers {', '.join(FITTED_FIELDS)}") from None
        if not (0 < values["memory_bandwidth_efficiency_fraction"] <= 1
                and 0 < values["compute_efficiency_fraction"] <= 1
                and values["roofline_sharpness_p"] >= 1):
            raise CostModelInputError(f"kernel_efficiency.{gpu_id}",
                                      "efficiencies must be in (0, 1] and p >= 1")
        out[gpu_id] = values
    return out


def engine_gpu(gpu: GpuSpec, engine: EngineProfile | None) -> GpuSpec:
    """The GPU preset as `engine` prices it: with the table-fitted efficiencies where the
    profile asks for them and the file covers the GPU, else unchanged."""
    if engine is None or engine.gemm_efficiency_source != "tables":
        return gpu
    fit = table_efficiencies().get(gpu.gpu_id)
    if fit is None:
        return gpu
    return replace(gpu, **fit, **dict.fromkeys(CLEARED_FIELDS))
