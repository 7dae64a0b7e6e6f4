"""The configuration of a serving sweep (`python run.py serve`); src/online/cli.py validates it."""

from __future__ import annotations

from dataclasses import dataclass

from src.config import AlphaDistribution, LengthDistribution
from src.hardware.scenario import Scenario
from src.online.arrivals import ArrivalProcess, Trace
from src.online.engine import EngineLimits


@dataclass(frozen=True)
class ServeConfig:
    """Everything a serving sweep needs, validated (see cli.py for the options that set it)."""

    scenario: Scenario
    engine_profile: str
    rates_per_s: tuple[float, ...]
    policies: str  # comma-separated policy list (src/online/policies.py)
    workload: str  # preset name, "trace" or "scenario"
    prompt_len: LengthDistribution
    output_len: LengthDistribution
    workload_source: str
    alpha_mode: str
    alpha: AlphaDistribution
    arrival: ArrivalProcess = ArrivalProcess()
    trace: Trace | None = None
    requests_per_replication: int | None = 500
    duration_s: float | None = None
    replications: int = 4
    slo_ttft_s: float = 2.0
    slo_tpot_s: float = 0.050
    limits: EngineLimits = EngineLimits()
    max_gamma: int = 8
    schedule_json: str | None = None
    seed: int = 20261129
    confidence: float = 0.95
    slo_attainment_target: float = 0.9  # a rate "meets the SLO" when this share of requests does
    # closed-loop clients per point (serve --concurrency), run in place of rates_per_s (which
    # then holds the same values as the sweep's keys); empty: open-loop arrivals at the rates
    concurrency: tuple[int, ...] = ()

    @property
    def arrival_label(self) -> str:
        """How requests arrive: "trace" when a trace is replayed (its own times, perhaps
        rescaled to a rate), else the process's label ("poisson", "gamma(cv=2)")."""
        return "trace" if self.trace is not None else self.arrival.label()

    @property
    def alpha_label(self) -> str:
        """The acceptance that runs: "trace" when the trace's alpha column gives each request's
        alpha (the quality mode is then not used), else the mode's name."""
        from_trace = self.trace is not None and self.trace.alpha is not None
        return "trace" if from_trace else self.alpha_mode


# -- the work a sweep may ask for, bounded before anything is allocated --------------------------
MAX_REQUESTS_PER_REPLICATION = 1_000_000  # --requests's cap; --duration-s's arrivals too
# requests simulated together at one rate (policies x replications x requests a replication): the
# engine keeps about BYTES_PER_REQUEST_ROW of arrays per request (its per-request state, the
# request table and the copies that build it), so the cap is about 2 GB per worker process
MAX_REQUEST_ROWS = 10_000_000
BYTES_PER_REQUEST_ROW = 200


def arrivals_to_draw(rate_per_s: float, duration_s: float) -> int:
    """Arrivals drawn to cover a --duration-s window at a rate: the expected rate x duration with
    a margin (30%, 10 Poisson standard deviations and 20); those past the window are dropped."""
    mean = rate_per_s * duration_s
    return int(mean * 1.3 + 10 * mean**0.5 + 20)
