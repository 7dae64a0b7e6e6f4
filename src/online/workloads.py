"""Workload presets (src/presets/workloads.toml) and the requests of one serving replication.

A preset is a prompt and an output length distribution with its source. `make_requests` draws
each replication's requests from streams keyed by (seed, workload, replication) only, so every
rate and policy serves the same requests (common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from src.config import (
    AlphaDistribution,
    ConfigError,
    LengthDistribution,
    LognormalLength,
    parse_length_distribution,
    read_toml,
)
from src.errors import ascii_float, ascii_int
from src.online.counter_rng import request_keys
from src.workload import sample_alpha, sample_lengths, stream

WORKLOADS_FILE = Path(__file__).resolve().parents[1] / "presets" / "workloads.toml"


@dataclass(frozen=True)
class WorkloadPreset:
    name: str
    description: str
    prompt_len: LengthDistribution
    output_len: LengthDistribution
    source: str


def _length(name: str, table) -> LengthDistribution:
    """A length table: the study's kinds, or lognormal_mean {mean, cv, low, high}."""
    if isinstance(table, dict) and table.get("kind") == "lognormal_mean":
        keys = {"kind", "mean", "cv", "low", "high"}
        if set(table) != keys:
            raise ConfigError(
                name, f"lognormal_mean needs exactly {', '.join(sorted(keys - {'kind'}))}"
            )
        try:
            mean, cv = ascii_float(table["mean"]), ascii_float(table["cv"])
            low, high = ascii_int(table["low"]), ascii_int(table["high"])
        except (TypeError, ValueError):
            mean = cv = math.nan
        if not (mean > 0 and cv > 0 and math.isfinite(mean) and math.isfinite(cv)):
            raise ConfigError(name, "lognormal_mean needs numbers mean > 0 and cv > 0 and "
                                    "integers low, high (ASCII digits)")
        sigma = math.sqrt(math.log1p(cv**2))
        return LognormalLength(mean / math.sqrt(1 + cv**2), sigma, low, high)
    return parse_length_distribution(name, table)


def load_workloads(path: Path = WORKLOADS_FILE) -> dict[str, WorkloadPreset]:
    data = read_toml(path, "workloads")
    out = {}
    for name, t in data.get("workloads", {}).items():
        out[name] = WorkloadPreset(
            name=name,
            description=t["description"],
            prompt_len=_length(f"workloads.{name}.prompt", t["prompt"]),
            output_len=_length(f"workloads.{name}.output", t["output"]),
            source=t["source"],
        )
    return out


def workload_preset(name: str, field_name: str = "--workload") -> WorkloadPreset:
    presets = load_workloads()
    if name not in presets:
        raise ConfigError(
            field_name, f"unknown workload '{name}'; allowed: {', '.join(sorted(presets))}"
        )
    return presets[name]


@dataclass(frozen=True)
class ReplicationRequests:
    """The requests of one replication (arrival times are added per rate)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    alpha: np.ndarray
    key: np.ndarray


def make_requests(
    seed: int,
    workload: str,
    prompt_len: LengthDistribution,
    output_len: LengthDistribution,
    alpha_mode: str,
    alpha: AlphaDistribution,
    replication: int,
    n: int,
) -> ReplicationRequests:
    """n requests of one replication, keyed by (seed, workload, quality mode, replication)."""
    rng = stream(seed, "serving-lengths", workload, replication)
    prompt = sample_lengths(rng, prompt_len, (n,))
    output = sample_lengths(rng, output_len, (n,))
    a = sample_alpha(stream(seed, "serving-alpha", alpha_mode, replication), alpha, (n,))
    keys = request_keys(stream(seed, "serving-accept", replication), (n,))
    return ReplicationRequests(prompt, output, a, keys)


def mean_length(dist: LengthDistribution, seed: int = 0) -> float:
    """Mean of a length distribution (100k draws of its own stream)."""
    return float(sample_lengths(stream(seed, "mean", repr(dist)), dist, (100_000,)).mean())
