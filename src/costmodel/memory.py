"""Memory fit: do the weights and the KV cache of a batch fit in one GPU's memory?

Per GPU: weights / TP + KV bytes per cached token / TP x cached tokens, against the GPU's memory
minus CostModelParams.memory_reserve_fraction (design.md, "Memory fit").
"""
from __future__ import annotations

import numpy as np

from src.costmodel.presets import CostModelInputError, CostModelParams, GpuSpec


def memory_needed_bytes(weight_bytes_per_gpu: float, kv_bytes_per_token_per_gpu: float,
                        kv_tokens) -> np.ndarray:
    """Per-GPU memory: weights / TP + KV cache of every cached token / TP (before the reserve)."""
    return weight_bytes_per_gpu + kv_bytes_per_token_per_gpu * np.asarray(kv_tokens, float)


def memory_usable_bytes(gpu: GpuSpec, params: CostModelParams) -> float:
    return gpu.memory_bytes * (1.0 - params.memory_reserve_fraction)


def raise_does_not_fit(gpu, params, what, need_bytes, weight_bytes, kv_tokens):
    """CostModelInputError saying what does not fit: the weights alone (field tp) or weights + KV
    cache (field batch/context)."""
    usable = memory_usable_bytes(gpu, params)
    if weight_bytes > usable:  # no batch or context can fit: the weights alone are too large
        raise CostModelInputError(
            "tp", f"{what} has {weight_bytes / 1e9:.1f} GB of weights per GPU but {gpu.gpu_id} has "
            f"{usable / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus "
            f"{params.memory_reserve_fraction:.0%} "
            "reserve); allowed: a larger tp")
    raise CostModelInputError(
        "batch/context", f"{what} needs {need_bytes / 1e9:.1f} GB per GPU (weights "
        f"{weight_bytes / 1e9:.1f} GB + KV cache of {int(kv_tokens)} tokens "
        f"{(need_bytes - weight_bytes) / 1e9:.1f} GB) but {gpu.gpu_id} has "
        f"{memory_usable_bytes(gpu, params) / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus "
        f"{params.memory_reserve_fraction:.0%} reserve); allowed: a larger tp, a smaller batch "
        "or a shorter context")
