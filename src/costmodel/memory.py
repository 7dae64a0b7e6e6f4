"""Memory fit: do the weights and the KV cache of a batch fit in one GPU's memory?

Per GPU: weights / TP + KV bytes per cached token / TP x cached tokens, against the GPU's memory
minus CostModelParams.memory_reserve_fraction (design.md, "Memory fit").
"""
from __future__ import annotations

import numpy as np

from src.costmodel.presets import CostModelInputError, CostModelParams, GpuSpec, check_tp


def memory_needed_bytes(weight_bytes_per_gpu: float, kv_bytes_per_token_per_gpu: float,
                        kv_tokens) -> np.ndarray:
    """Per-GPU memory: weights / TP + KV cache of every cached token / TP (before the reserve)."""
    return weight_bytes_per_gpu + kv_bytes_per_token_per_gpu * np.asarray(kv_tokens, float)


def memory_usable_bytes(gpu: GpuSpec, params: CostModelParams) -> float:
    return gpu.memory_bytes * (1.0 - params.memory_reserve_fraction)


def smallest_tp_that_fits(model, gpu, params, max_tp: int = 64) -> int | None:
    """Smallest TP degree (one check_tp allows) at which model's weights alone fit on one GPU;
    None if none up to max_tp does. Expert parallelism (any ep dividing tp) holds the same
    bytes per GPU."""
    usable = memory_usable_bytes(gpu, params)
    for tp in range(1, max_tp + 1):
        try:
            check_tp(model, tp)
        except CostModelInputError:
            continue
        if model.weight_bytes / tp <= usable:
            return tp
    return None


def raise_does_not_fit(gpu, params, what, need_bytes, weight_bytes, kv_tokens, model=None):
    """CostModelInputError saying what does not fit: the weights alone (field tp; with `model`,
    naming the smallest TP that holds them) or weights + KV cache (field batch/context)."""
    usable = memory_usable_bytes(gpu, params)
    if weight_bytes > usable:  # no batch or context can fit: the weights alone are too large
        allowed = "a larger tp"
        smallest = None if model is None else smallest_tp_that_fits(model, gpu, params)
        if smallest is not None:
            moe = " (or ep = tp for its experts: the same bytes per GPU)" if getattr(
                model, "n_routed_experts", 0) else ""
            allowed = (f"tp >= {smallest}, the smallest whose weights fit "
                       f"({model.weight_bytes / smallest / 1e9:.1f} GB per GPU){moe}")
        elif model is not None:
            allowed = "no tp up to 64 holds the weights on this GPU; a GPU with more memory"
        raise CostModelInputError(
            "tp", f"{what} has {weight_bytes / 1e9:.1f} GB of weights per GPU but {gpu.gpu_id} has "
            f"{usable / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus "
            f"{params.memory_reserve_fraction:.0%} "
            f"reserve); allowed: {allowed}")
    raise CostModelInputError(
        "batch/context", f"{what} needs {need_bytes / 1e9:.1f} GB per GPU (weights "
        f"{weight_bytes / 1e9:.1f} GB + KV cache of {int(kv_tokens)} tokens "
        f"{(need_bytes - weight_bytes) / 1e9:.1f} GB) but {gpu.gpu_id} has "
        f"{memory_usable_bytes(gpu, params) / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus "
        f"{params.memory_reserve_fraction:.0%} reserve); allowed: a larger tp, a smaller batch "
        "or a shorter context")
