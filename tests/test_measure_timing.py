"""Tests of the timing loop (src/measure/timing.py). The CUDA path runs against a fake of the
few torch.cuda calls it makes (events, streams, graph capture), so its control flow is checked on
machines without a GPU; skipped without torch. torch is imported when the first test here runs, not
when pytest collects the file (a test worker that runs none of these never pays its import)."""
from __future__ import annotations

import contextlib
import importlib.util

import pytest

from src.measure.plan import RepPolicy

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")


@pytest.fixture(scope="module")
def torch():
    import torch

    return torch


@pytest.fixture(scope="module")
def timing(torch):
    """src.measure.timing (it imports torch)."""
    from src.measure import timing

    return timing


class FakeCuda:
    """A GPU clock in ms that advances only when work 'runs': a graph replay or an eager step."""

    def __init__(self, replay_ms: float):
        self.now_ms = 0.0
        self.replay_ms = replay_ms
        self.replays = 0
        self.captures = 0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.t = None

            def record(self):
                self.t = fake.now_ms

            def synchronize(self):
                pass

            def elapsed_time(self, end):
                return end.t - self.t

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                pass

            def synchronize(self):
                pass

        class CUDAGraph:
            capturing = False

            def capture_begin(self):
                CUDAGraph.capturing = True
                fake.captures += 1

            def capture_end(self):
                CUDAGraph.capturing = False

            def replay(self):
                fake.replays += 1
                fake.now_ms += fake.replay_ms

            def reset(self):
                pass

        self.Event, self.Stream, self.CUDAGraph = Event, Stream, CUDAGraph

    def install(self, monkeypatch, torch):
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "Stream", self.Stream)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", self.CUDAGraph)
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.Stream())
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)


def test_graph_mode_runs_eagerly_once_captures_once_then_times_replays(monkeypatch, torch, timing):
    fake = FakeCuda(replay_ms=2.0)
    fake.install(monkeypatch, torch)
    calls = []

    def step():
        calls.append(fake.CUDAGraph.capturing)
        return torch.zeros(1)

    policy = RepPolicy(target_ms=9.0, min_reps=2, max_reps=100, warmup=2)
    result = timing.time_step(step, torch.device("cuda"), "graph", policy)
    assert calls == [False, True]  # one eager warm-up outside the capture, one captured call
    assert fake.captures == 1
    # 2 untimed warm-up replays, then ceil(9 / 2) = 5 timed ones of 2 ms each
    assert fake.replays == 2 + 5
    assert result == timing.Timing(2.0, 2.0, 2.0, 2.0, 5)


def test_eager_mode_times_each_call(monkeypatch, torch, timing):
    fake = FakeCuda(replay_ms=0.0)
    fake.install(monkeypatch, torch)
    durations = iter([50.0, 3.0] + [3.0, 4.0, 5.0, 3.0])  # first warm-up is slow (setup)

    def step():
        fake.now_ms += next(durations)
        return torch.zeros(1)

    policy = RepPolicy(target_ms=10.0, min_reps=2, max_reps=100, warmup=2)
    result = timing.time_step(step, torch.device("cuda"), "eager", policy)
    # the last warm-up (3 ms) sets reps = ceil(10 / 3) = 4; the slow first call is not timed
    assert result.reps == 4 and result.min_ms == 3.0 and result.median_ms == 3.5
    assert fake.captures == 0


def test_cpu_timing_needs_eager_mode(torch, timing):
    with pytest.raises(ValueError, match="CUDA"):
        timing.time_step(lambda: None, torch.device("cpu"), "graph", RepPolicy())


def test_timing_summary_uses_linear_percentiles(timing):
    t = timing.Timing.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (t.median_ms, t.p10_ms, t.p90_ms, t.min_ms, t.reps) == (3.0, 1.4, 4.6, 1.0, 5)
    with pytest.raises(ValueError):
        timing.Timing.of([])
