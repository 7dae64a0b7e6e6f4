"""Timing one step: warm-up, optional CUDA-graph capture, then timed repetitions.

On a CUDA device:
  graph  the step runs once eagerly on a side stream (cuBLAS and attention pick their kernels
         and allocate workspaces; a backend that cannot run this shape fails here), is captured
         into one CUDA graph, and the graph is replayed. Each replay is bracketed by a pair of
         CUDA events: GPU time of the whole step without CPU launch gaps, what an engine with
         CUDA graphs pays on the GPU.
  eager  the step is called from Python each time, bracketed the same way: the GPU time then
         includes the gaps while the CPU launches kernels (launch-bound at small batch).
Replays are enqueued back to back and read after one synchronisation, so timing adds no gaps.
`warmup` untimed runs come first; the last one's time sets the repetitions (RepPolicy.reps:
about target_ms of timed work). On the CPU (smoke runs) wall-clock time brackets each call.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from src.measure.plan import RepPolicy


@dataclass(frozen=True)
class Timing:
    """Summary of the timed repetitions of one configuration, ms."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    reps: int

    @classmethod
    def of(cls, samples_ms) -> "Timing":
        """Median, 10th and 90th percentiles (linear interpolation) and minimum."""
        a = np.asarray(samples_ms, dtype=float)
        if a.size == 0:
            raise ValueError("no samples")
        p10, p50, p90 = np.percentile(a, [10, 50, 90])
        return cls(float(p50), float(p10), float(p90), float(a.min()), int(a.size))


def time_step(step: Callable[[], torch.Tensor], device: torch.device, mode: str,
              policy: RepPolicy) -> Timing:
    """Time `step` on `device` in `mode` (graph | eager); see the module docstring."""
    if device.type != "cuda":
        if mode != "eager":
            raise ValueError(f"mode {mode} needs a CUDA device")
        return Timing.of(_cpu_samples(step, policy))
    if mode == "eager":
        return Timing.of(_cuda_samples(step, policy))
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):
        step()  # eager: kernel choice, workspaces; an unusable backend raises here
        side.synchronize()
        # capture_begin/end rather than torch.cuda.graph(), which empties the allocator cache
        # and collects garbage before every capture: seconds over hundreds of configurations
        graph.capture_begin()
        try:
            out = step()
        finally:
            graph.capture_end()
    torch.cuda.current_stream(device).wait_stream(side)
    try:
        return Timing.of(_cuda_samples(graph.replay, policy))
    finally:
        del out
        graph.reset()


def _cuda_samples(run: Callable[[], object], policy: RepPolicy) -> list[float]:
    def pair():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    probe = pair()
    for i in range(policy.warmup):
        if i == policy.warmup - 1:
            probe[0].record()
        run()
    probe[1].record()
    probe[1].synchronize()
    reps = policy.reps(probe[0].elapsed_time(probe[1]))
    events = [pair() for _ in range(reps)]
    for start, end in events:
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def _cpu_samples(run: Callable[[], object], policy: RepPolicy) -> list[float]:
    last = 0.0
    for _ in range(policy.warmup):
        t0 = time.perf_counter()
        run()
        last = (time.perf_counter() - t0) * 1e3
    samples = []
    for _ in range(policy.reps(last)):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples
