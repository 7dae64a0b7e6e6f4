"""Tensor-parallel all-reduce: NCCL and the custom one-shot / two-shot kernels of vLLM and SGLang.

Tensor parallelism all-reduces the activations (tokens x hidden x 2 bytes) twice per decoder layer.
An engine profile picks the implementation (EngineProfile.allreduce); design.md ("Tensor-parallel
all-reduce") gives the sources and the checks against published measurements.

    NCCL      t = latency + 2 (n-1)/n bytes / bus_bandwidth   (nccl-tests bus-bandwidth convention;
              latency and bus bandwidth fitted per GPU count where measured, else the generic
              CostModelParams latency and link efficiency)
    one-shot  t = L1 + (n-1) bytes / (f1 link)        every GPU reads every peer's whole buffer
    two-shot  t = L2 + 2 (n-1)/n bytes / (f2 link)    reduce-scatter, then all-gather
    link = the GPU's one-direction interconnect bandwidth
    L1, f1, L2, f2: src/presets/allreduce.toml

"custom" follows vLLM's dispatch (csrc/custom_all_reduce.cuh, device_communicators/
custom_all_reduce.py): 2, 4, 6 or 8 GPUs of one node, fully connected beyond 2; one-shot for 2 GPUs
or below 512 KiB (4 GPUs) / 256 KiB (6, 8 GPUs), two-shot below 8 MiB, NCCL from 8 MiB on.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from src.config import read_toml
from src.costmodel.presets import (
    PRESETS_DIR,
    AllReduceFit,
    CostModelInputError,
    CostModelParams,
    GpuSpec,
    _check_positive_fields,
    _coerce_fields,
)

ALLREDUCE_IMPLEMENTATIONS = ("nccl", "custom")
CUSTOM_ALLREDUCE_FILE = PRESETS_DIR / "allreduce.toml"
CUSTOM_ALLREDUCE_WORLD_SIZES = (2, 4, 6, 8)
CUSTOM_ALLREDUCE_MAX_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class CustomAllReduceParams:
    """Latency and achieved link bandwidth of the custom all-reduce's two kernels."""

    one_shot_latency_us: float  # fixed time of the one-shot kernel, microseconds
    one_shot_link_efficiency_fraction: float  # peer bytes read per second / one-direction link
    two_shot_latency_us: float  # fixed time of the two-shot kernel, microseconds
    two_shot_link_efficiency_fraction: float  # bus bytes per second / one-direction link


def load_custom_allreduce(path: str | Path = CUSTOM_ALLREDUCE_FILE) -> CustomAllReduceParams:
    """The [custom] table of src/presets/allreduce.toml; CostModelInputError if malformed."""
    data = read_toml(path, "allreduce", CostModelInputError)
    raw = data.get("custom")
    if not isinstance(raw, dict):
        raise CostModelInputError("allreduce", f"{path} needs a [custom] table")
    values = _coerce_fields(CustomAllReduceParams, "allreduce", "custom", raw, partial=False)
    _check_positive_fields("allreduce", "custom", values)
    return CustomAllReduceParams(**values)


def allreduce_coefficients(gpu: GpuSpec, n_gpus: int, params: CostModelParams,
                           allreduce: Sequence[AllReduceFit] = ()) -> tuple[float, float]:
    """(latency_s, bus_bandwidth_bytes_per_s) of NCCL over n_gpus GPUs of this type."""
    for fit in allreduce:
        if fit.gpu_id == gpu.gpu_id and fit.n_gpus == n_gpus:
            return fit.latency_us * 1e-6, fit.bus_bandwidth_gb_per_s * 1e9
    return (params.allreduce_latency_us * 1e-6,
            params.allreduce_link_efficiency_fraction * gpu.interconnect_bidirectional_gb_per_s
            * 1e9 / 2)


@dataclass(frozen=True)
class AllReduceCost:
    """Time of one all-reduce on n GPUs, vectorised over message sizes (module docstring).
    custom False = NCCL only; True = vLLM's dispatch between its kernels and NCCL."""

    n_gpus: int
    nccl_latency_s: float
    nccl_bus_bytes_per_s: float
    custom: bool = False
    one_shot_latency_s: float = 0.0
    one_shot_bytes_per_s: float = 1.0
    two_shot_latency_s: float = 0.0
    two_shot_bytes_per_s: float = 1.0

    def nccl_s(self, nbytes):
        n = self.n_gpus
        return (self.nccl_latency_s
                + 2 * (n - 1) / n * np.asarray(nbytes, float) / self.nccl_bus_bytes_per_s)

    def algorithm(self, nbytes) -> np.ndarray:
        """Which kernel runs for each message size: "nccl", "one-shot" or "two-shot"."""
        nbytes = np.asarray(nbytes, float)
        if not self.custom:
            return np.full(nbytes.shape, "nccl")
        n = self.n_gpus
        one_below = np.inf if n == 2 else 512 * 1024 if n <= 4 else 256 * 1024
        return np.where(nbytes >= CUSTOM_ALLREDUCE_MAX_BYTES, "nccl",
                        np.where(nbytes < one_below, "one-shot", "two-shot"))

    def time_s(self, nbytes):
        """Seconds per all-reduce of each message size."""
        nbytes = np.asarray(nbytes, float)
        nccl = self.nccl_s(nbytes)
        if not self.custom:
            return nccl
        n = self.n_gpus
        one = self.one_shot_latency_s + (n - 1) * nbytes / self.one_shot_bytes_per_s
        two = self.two_shot_latency_s + 2 * (n - 1) / n * nbytes / self.two_shot_bytes_per_s
        algo = self.algorithm(nbytes)
        return np.where(algo == "nccl", nccl, np.where(algo == "one-shot", one, two))


def custom_allreduce_supported(gpu: GpuSpec, n_gpus: int) -> bool:
    """vLLM enables its custom all-reduce for 2 GPUs, or 4/6/8 fully connected ones (an NVSwitch
    node or a fully connected mesh, as the GPU preset's `interconnect` says)."""
    link = gpu.interconnect.lower()
    return n_gpus in CUSTOM_ALLREDUCE_WORLD_SIZES and (
        n_gpus == 2 or "nvswitch" in link or "fully connected" in link)


def allreduce_cost(gpu: GpuSpec, n_gpus: int, params: CostModelParams,
                   allreduce: Sequence[AllReduceFit] = (), implementation: str = "nccl",
                   custom: CustomAllReduceParams | None = None) -> AllReduceCost:
    """The all-reduce model of `implementation` ("nccl" or "custom") on this system; "custom"
    falls back to NCCL where vLLM would (an unsupported GPU count, no full connectivity)."""
    if implementation not in ALLREDUCE_IMPLEMENTATIONS:
        raise CostModelInputError("allreduce", f"unknown implementation '{implementation}'; "
                                               f"allowed: {', '.join(ALLREDUCE_IMPLEMENTATIONS)}")
    lat, bus = allreduce_coefficients(gpu, n_gpus, params, allreduce)
    if implementation == "nccl" or not custom_allreduce_supported(gpu, n_gpus):
        return AllReduceCost(n_gpus, lat, bus)
    c = custom if custom is not None else load_custom_allreduce()
    link = gpu.interconnect_bidirectional_gb_per_s * 1e9 / 2
    return AllReduceCost(n_gpus, lat, bus, custom=True,
                         one_shot_latency_s=c.one_shot_latency_us * 1e-6,
                         one_shot_bytes_per_s=c.one_shot_link_efficiency_fraction * link,
                         two_shot_latency_s=c.two_shot_latency_us * 1e-6,
                         two_shot_bytes_per_s=c.two_shot_link_efficiency_fraction * link)
