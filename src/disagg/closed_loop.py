"""A disaggregated deployment under C closed-loop clients: analytic steady state.

Each client sends a request (ISL prompt tokens, OSL output tokens), waits for its last token and
sends the next (the benchmarks' concurrency mode). A request visits two stations:

    prefill pool   c = prefill_workers x prefill_dp servers; a server prefills one prompt at a
                   time: s = prefill_time(dp prompts of ISL) on the worker's cost model (tp x dp
                   GPUs: the GEMMs of dp prompts over G GPUs do the FLOPs each rank does for its
                   own prompt; prefill is compute-bound)
    decode pool    a delay of Z = transfer_ms(ISL) + (OSL - 1) x TPOT (the first token comes
                   from the prefill), TPOT = step_ms(N per worker) / tokens per step

The closed network is solved by Mean Value Analysis (Reiser & Lavenberg 1980) with the prefill
pool's c servers replaced by Seidmann's approximation (Seidmann, Schweitzer & Shalev-Oren 1987:
one server of service s / c plus a pure delay s (c - 1) / c):

    Q(0) = 0;  for k = 1..C:  R(k) = (s / c)(1 + Q(k-1)),  X(k) = k / (R(k) + s (c-1)/c + Z),
                             Q(k) = X(k) R(k)
    TTFT = R(C) + s (c - 1) / c + transfer_ms        queueing + prefill + transfer
    prefill utilisation = X s / c,   decode requests in flight = X (OSL - 1) TPOT  (Little)

TPOT depends on the decode occupancy and the occupancy on TPOT: the fixed point in the
occupancy is found by bisection (the occupancy the network implies grows with the one assumed).
Speculation: a fixed gamma per step, tokens per step Omega_eff (src/hardware/steady_state.py,
the harmonic mean of E[K+1](alpha) over the requests' alphas); gamma 0 is greedy.

Where it breaks: MVA is exact for exponential service at a single server; prefill times are
near deterministic (queueing overstated at moderate load) and Seidmann's split is an
approximation between light and heavy load. Every request on a worker is at the mean context
ISL + OSL / 2 (the project's steady-state closed form does the same). Adaptive speculation
policies, the benchmark's first wave (every client starting at once: a burst the steady state
does not see), prefill batching of several prompts per rank, chunked prefill and decode-side
admission limits (max running requests, CUDA-graph batch sizes) are not modelled.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from src.attention_dp.worker import DecodeWorker
from src.config import ConfigError
from src.costmodel import memory_usable_bytes
from src.costmodel.shapes import kv_tp_divisor
from src.disagg.config import DisaggConfig, weight_bytes_per_gpu
from src.disagg.transfer import kv_link, transfer_ms
from src.hardware.steady_state import effective_tokens_per_step

BISECTION_STEPS = 48


@dataclass(frozen=True)
class DisaggEstimate:
    """Steady-state figures of one (deployment, ISL, OSL, concurrency, gamma)."""

    concurrency: int
    ttft_ms: float
    tpot_ms: float
    queue_ms: float  # waiting for a prefill server
    prefill_ms: float  # one prompt's prefill pass (s)
    transfer_ms: float
    decode_step_ms: float
    tokens_per_step: float
    decode_requests_per_worker: float  # mean in flight
    prefill_utilisation: float
    throughput_tokens_per_s: float  # output tokens, all clients


def check_decode_fits(model, gpu, params, shape, requests_per_rank: int, tokens: int,
                      workers_field: str = "disagg.decode_workers", need_workers=None) -> None:
    """The busiest decode rank's weights + KV cache of requests_per_rank x tokens must fit;
    ConfigError naming `workers_field` and the fewest decode workers that fit otherwise."""
    usable = memory_usable_bytes(gpu, params)
    weights = weight_bytes_per_gpu(model, shape.tp, shape.dp)
    per_req = tokens * model.kv_bytes_per_token / kv_tp_divisor(model, shape.tp)
    if weights + requests_per_rank * per_req <= usable:
        return
    room = int((usable - weights) // per_req)
    hint = (f"at most {room} requests per DP rank" + (
        f": decode_workers >= {need_workers(room)}" if need_workers and room > 0 else ""))
    raise ConfigError(workers_field,
                      f"{requests_per_rank} requests of {tokens} tokens per decode rank need "
                      f"{(weights + requests_per_rank * per_req) / 1e9:.1f} GB per GPU but "
                      f"{gpu.gpu_id} has {usable / 1e9:.1f} GB usable; allowed: {hint}")


def _mva(C: int, s: float, c: int, Z: float) -> tuple[float, float]:
    """(R, X) of the Seidmann-MVA recursion at C clients (module docstring); ms and 1/ms."""
    Q, R, X = 0.0, 0.0, 0.0
    fixed = s * (c - 1) / c
    for k in range(1, C + 1):
        R = (s / c) * (1.0 + Q)
        X = k / (R + fixed + Z)
        Q = X * R
    return R, X


def estimate(prefill_cost, decode: DecodeWorker, disagg: DisaggConfig, isl: int, osl: int,
             concurrency: int, gamma: int = 0, alphas=None) -> DisaggEstimate:
    """The steady state of `concurrency` closed-loop clients (module docstring). prefill_cost:
    the prefill worker's HardwareCostModel (tp x dp GPUs); decode: a decode worker."""
    C = int(concurrency)
    if C < 1:
        raise ConfigError("concurrency", f"expected an integer >= 1, got {concurrency!r}")
    if gamma and alphas is None:
        raise ConfigError("alpha", "a speculative estimate (gamma > 0) needs the acceptance")
    pre, dec = disagg.prefill, disagg.decode
    cost = decode.cost
    model = cost.target
    omega = 1.0 if gamma == 0 else effective_tokens_per_step(np.asarray(alphas, float), gamma)
    tokens = isl + osl + gamma + 1
    ranks = dec.workers * dec.dp
    check_decode_fits(model, cost.gpu, cost.params, dec, math.ceil(C / ranks), tokens,
                      need_workers=lambda room: math.ceil(C / (room * dec.dp)))
    s = float(prefill_cost.prefill_time(pre.dp, isl))
    c = pre.workers * pre.dp
    xfer = float(transfer_ms(model, isl, kv_link(disagg.link(), cost.gpu), pre.tp, dec.tp))
    ctx = isl + osl / 2.0

    def tpot(n_flight: float) -> tuple[float, float]:
        per_worker = max(1, math.ceil(n_flight / dec.workers - 1e-9))
        step = decode.step_ms(per_worker, ctx, gamma)
        return step / omega, step

    def implied(n_flight: float):
        t, step = tpot(n_flight)
        D = (osl - 1) * t
        R, X = _mva(C, s, c, xfer + D)
        return X * D, t, step, R, X

    lo, hi = 0.0, float(C)
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if implied(mid)[0] > mid:
            lo = mid
        else:
            hi = mid
    n_flight, t, step, R, X = implied(hi)
    queue = R - s / c
    return DisaggEstimate(
        concurrency=C, ttft_ms=R + s * (c - 1) / c + xfer, tpot_ms=t, queue_ms=max(queue, 0.0),
        prefill_ms=s, transfer_ms=xfer, decode_step_ms=step, tokens_per_step=omega,
        decode_requests_per_worker=n_flight / dec.workers, prefill_utilisation=X * s / c,
        throughput_tokens_per_s=X * osl * 1e3)
