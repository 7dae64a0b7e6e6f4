"""Request arrival times: Poisson, a burstier gamma renewal process, or a trace file.

Every process is built from unit-rate draws scaled by 1 / rate, keyed by (seed, process, CV,
replication) only, so every rate and every policy sees the same draws (common random numbers): the
k-th arrival at rate 8 comes exactly half as late as at rate 4. The first request arrives at 0, as
in vLLM's `benchmark_serving` (which sends one, then sleeps an inter-arrival time).

* Poisson at rate lambda: inter-arrival times i.i.d. Exp(lambda) (CV 1).
* Gamma renewal with coefficient of variation CV: inter-arrivals i.i.d. Gamma(shape k = 1 / CV^2,
  scale 1 / (k lambda)), mean 1 / lambda, CV > 1 burstier than Poisson (vLLM's benchmark offers
  the same knob as `--burstiness` = k).
* Trace: a CSV with a header `arrival_s,prompt_tokens,output_tokens` and optionally `alpha` (the
  request's per-token acceptance probability), rows sorted by arrival time (an unsorted file is
  refused: a shuffled or concatenated trace is a mistake to see, not to re-sort). Times are
  seconds from the start; the trace is replayed as is, or its times are scaled so that its
  mean rate is each --rates value.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

import numpy as np

from src.config import ConfigError, read_text_file
from src.errors import ascii_float
from src.workload import stream


@dataclass(frozen=True)
class ArrivalProcess:
    """kind "poisson" or "gamma" (cv = coefficient of variation of the inter-arrival time)."""

    kind: str = "poisson"
    cv: float = 1.0

    def label(self) -> str:
        return "poisson" if self.kind == "poisson" else f"gamma(cv={self.cv:g})"


def parse_arrival(text: str) -> ArrivalProcess:
    """'poisson' or 'gamma:CV' (CV > 0); ConfigError naming --arrival otherwise."""
    text = text.strip()
    if text == "poisson":
        return ArrivalProcess()
    if text.startswith("gamma:"):
        try:
            cv = ascii_float(text.split(":", 1)[1])
        except ValueError:
            cv = float("nan")
        if not (math.isfinite(cv) and cv > 0):
            raise ConfigError("--arrival", f"'{text}': the CV must be a number > 0, e.g. gamma:2")
        return ArrivalProcess("gamma", cv)
    raise ConfigError("--arrival", f"unknown process '{text}'; allowed: poisson, gamma:CV")


def unit_gaps(seed: int, process: ArrivalProcess, replication: int, n: int) -> np.ndarray:
    """n - 1 inter-arrival times of a unit-rate process (mean 1), keyed by the replication."""
    rng = stream(seed, "arrivals", process.kind, process.cv, replication)
    if process.kind == "poisson":
        return rng.standard_exponential(n - 1)
    shape = 1.0 / process.cv**2
    return rng.standard_gamma(shape, n - 1) / shape


def arrival_times(
    seed: int, process: ArrivalProcess, rate_per_s: float, replication: int, n: int
) -> np.ndarray:
    """Arrival times (s) of n requests at `rate_per_s`, the first at 0."""
    gaps = unit_gaps(seed, process, replication, n) / rate_per_s
    return np.concatenate([[0.0], np.cumsum(gaps)])


@dataclass(frozen=True)
class Trace:
    """Requests of a trace file, in arrival order; alpha is None when the file has no column."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    alpha: np.ndarray | None


TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")


def read_trace(path: str) -> Trace:
    """Read and check a trace CSV; ConfigError naming --trace, the line and the column."""
    text = read_text_file(path, "--trace", "a CSV file")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ConfigError(
            "--trace",
            f"{path} is empty; expected a header arrival_s,prompt_tokens,output_tokens[,alpha]",
        )
    header = [h.strip() for h in rows[0]]
    missing = [c for c in TRACE_COLUMNS if c not in header]
    if missing:
        raise ConfigError(
            "--trace",
            f"{path} lacks column(s) {', '.join(missing)}; expected a header "
            "arrival_s,prompt_tokens,output_tokens[,alpha]",
        )
    index = {c: header.index(c) for c in (*TRACE_COLUMNS, "alpha") if c in header}
    values = {c: [] for c in index}
    lines = []  # the file line of each request
    for line_no, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        lines.append(line_no)
        if len(row) < len(header):
            raise ConfigError(
                "--trace", f"{path} line {line_no}: {len(row)} fields, expected {len(header)}"
            )
        for column, i in index.items():
            cell = row[i].strip()
            try:
                value = ascii_float(cell)
            except ValueError:
                value = float("nan")
            integer = column in ("prompt_tokens", "output_tokens")
            ok = (
                math.isfinite(value)
                and {
                    "arrival_s": value >= 0,
                    "prompt_tokens": value >= 1 and value == int(value),
                    "output_tokens": value >= 1 and value == int(value),
                    "alpha": 0 < value < 1,
                }[column]
            )
            if not ok:
                allowed = {
                    "arrival_s": "a number of seconds >= 0",
                    "prompt_tokens": "an integer >= 1",
                    "output_tokens": "an integer >= 1",
                    "alpha": "a number strictly between 0 and 1",
                }[column]
                raise ConfigError(
                    "--trace", f"{path} line {line_no}: {column} '{cell}' is not {allowed}"
                )
            values[column].append(int(value) if integer else value)
    if not values["arrival_s"]:
        raise ConfigError("--trace", f"{path} has a header but no requests")
    arrival = np.asarray(values["arrival_s"])
    back = np.flatnonzero(np.diff(arrival) < 0)
    if back.size:  # a shuffled or concatenated file: replaying it re-sorted would hide that
        i = int(back[0])
        raise ConfigError("--trace", f"{path} line {lines[i + 1]}: arrival_s {arrival[i + 1]:g} "
                          f"comes before line {lines[i]}'s {arrival[i]:g}; allowed: rows sorted "
                          "by arrival_s (sort the file)")
    arrays = {c: np.asarray(v) for c, v in values.items()}
    return Trace(
        arrival_s=arrays["arrival_s"].astype(float),
        prompt_tokens=arrays["prompt_tokens"].astype(np.int64),
        output_tokens=arrays["output_tokens"].astype(np.int64),
        alpha=arrays.get("alpha"),
    )
