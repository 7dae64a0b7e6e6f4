"""Measured NCCL collectives: AIConfigurator's nccl_perf tables (all-gather, reduce-scatter).

aiconfigurator-core 0.12.0 ships, per system, nccl-tests timings of NCCL's collectives on one
node, comm/nccl/<nccl version>/nccl_perf.parquet: `latency` (ms) by op_name (all_gather,
reduce_scatter, all_reduce, alltoall), nccl_dtype (half, int8), num_gpus (2, 4, 8) and
message_size, the element count of the whole buffer in nccl-tests' convention (all ranks'
pieces together: the gathered output of an all-gather, the input of a reduce-scatter), as
AIConfigurator's own MoEDispatch queries it (`query_nccl(half, n, "all_gather", tokens x hidden x
attention_dp)`). The version is the one the system's spec names
(aiconfigurator_core/systems/<system>.yaml, misc.nccl_version: h200_sxm 2.26.2, b200_sxm 2.27.3).

Rule: bytes are read as half elements (bytes / 2), the half rows only; the latencies are made
non-decreasing in message size (a running maximum: nccl-tests' small messages jitter by a few
us), then interpolated linearly between measured sizes; below the smallest size the smallest's
latency (the fixed cost); above the largest the line through the last two points (the
bandwidth regime). `collective_ms` answers None where no table matches (another system, GPU
count or op): the caller keeps its roofline.
"""
from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

NCCL_OPS = ("all_gather", "reduce_scatter", "all_reduce")
BYTES_PER_ELEMENT = 2.0  # the half rows: message_size counts 2-byte elements


@lru_cache(maxsize=16)
def nccl_version(system: str) -> str:
    """misc.nccl_version of aiconfigurator_core/systems/<system>.yaml, or ''."""
    from src.kernels.sources import data_root
    root = data_root()
    if root is None or not system:
        return ""
    spec = root.parent / f"{system}.yaml"
    if not spec.is_file():
        return ""
    found = re.search(r"^\s*nccl_version:\s*['\"]?([0-9.]+)", spec.read_text(), re.MULTILINE)
    return found.group(1) if found else ""


@lru_cache(maxsize=64)
def _curve(system: str, op: str, n_gpus: int):
    """(message_size elements, latency ms) ascending and non-decreasing, or None."""
    from src.kernels.sources import data_root
    root, version = data_root(), nccl_version(system)
    if root is None or not version:
        return None
    path = root / system / "comm" / "nccl" / version / "nccl_perf.parquet"
    if not path.is_file():
        return None
    import pandas as pd
    d = pd.read_parquet(path)
    d = d[(d.op_name == op) & (d.nccl_dtype == "half") & (d.num_gpus == n_gpus)]
    if len(d) < 2:
        return None
    d = d.groupby("message_size").latency.mean().sort_index()
    return d.index.to_numpy(float), np.maximum.accumulate(d.to_numpy(float))


def collective_ms(system: str, op: str, n_gpus: int, nbytes):
    """ms of one NCCL `op` over n_gpus GPUs moving a whole buffer of `nbytes` (array), or None
    (module docstring)."""
    if op not in NCCL_OPS:
        raise ValueError(f"unknown NCCL op '{op}'; allowed: {', '.join(NCCL_OPS)}")
    curve = _curve(system or "", op, int(n_gpus)) if system else None
    if curve is None:
        return None
    x, y = curve
    elements = np.maximum(np.asarray(nbytes, dtype=float) / BYTES_PER_ELEMENT, x[0])
    out = np.interp(elements, x, y)
    slope = (y[-1] - y[-2]) / (x[-1] - x[-2])
    return np.where(elements > x[-1], y[-1] + slope * (elements - x[-1]), out)
