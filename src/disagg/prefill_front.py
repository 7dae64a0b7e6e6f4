"""The prefill pool in front of the decode worker's serving engine (`serve` on a [disagg]
deployment): its own first-come-first-served queue, then the KV transfer.

A request sent at time a (an open-loop arrival, or a closed-loop client's next request when its
last one finished on the decode worker) waits for the first free prefill server, c =
prefill_workers x prefill_dp servers (an attention-DP rank prefills one prompt at a time), and
is prefilled in s(P) = prefill_time(prefill_dp prompts of P tokens) on the prefill worker's cost
model (tp x dp GPUs; prefill is compute-bound, so dp prompts over the worker cost what each
rank's one costs; src/disagg/closed_loop.py prices it the same way). Its KV cache then moves to
the decode worker in transfer_ms(P) (src/disagg/transfer.py):

    start = max(a, earliest free server);  done = start + s(P);  arrival at decode = done + xfer

taken in the order requests are sent (FCFS with c servers, exact for that order). The decode
worker (the engine, src/online/engine_numpy.py) takes requests in send order too: where a
later-sent request's KV lands first (c > 1 with different prompt lengths), it waits behind the
earlier one (a head-of-line wait the fixed-length benchmarks never meet). The result's arrival
is the send time, so TTFT = prefill queue + s(P) + transfer + the decode worker's wait for a
slot and the step that takes the request in (when the prefill's first token is counted as
delivered); TPOT and ITL come from the decode worker's steps alone.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from src.disagg.transfer import KvLink, transfer_ms
from src.online.engine_numpy import NumpyEngine
from src.online.engine_types import EngineResult


class FcfsServers:
    """`servers` first-come-first-served servers taking requests in the order they are sent:
    done = max(sent, the earliest free server's time) + service (module docstring)."""

    def __init__(self, servers: int):
        self._free = [0.0] * servers  # a heap of the times the servers are next free

    def serve(self, sent: float, service: float) -> float:
        """The completion time of a request sent at `sent` needing `service`."""
        start = max(sent, heapq.heappop(self._free))
        heapq.heappush(self._free, start + service)
        return start + service


def fcfs_latency_s(arrival_s, service_s, after_s, servers: int):
    """(queue + service + after per request, total service, last completion) of requests in
    arrival order at `servers` FcfsServers (the prefill pool alone, as plan searches it)."""
    queue = FcfsServers(servers)
    done = np.array([queue.serve(a, s) for a, s in zip(np.asarray(arrival_s).tolist(),
                                                       np.asarray(service_s).tolist())])
    return (done - np.asarray(arrival_s) + np.asarray(after_s), float(np.sum(service_s)),
            float(done.max(initial=0.0)))


@dataclass
class DisaggResult(EngineResult):
    """EngineResult with the prefill pool's busy time per row (s) and its server count."""

    prefill_busy_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_servers: int = 1


@dataclass(frozen=True)
class PrefillPool:
    """The prefill pool and the KV link of one deployment; called as the serving engine's
    factory (study.Prepared.make_engine)."""

    prefill_cost: object  # HardwareCostModel of one prefill worker (tp x dp GPUs)
    prefill_dp: int
    servers: int  # prefill_workers x prefill_dp
    model: object  # the target ModelSpec (its KV layout)
    link: KvLink
    prefill_tp: int
    decode_tp: int

    def prefill_ms(self, prompt_tokens) -> np.ndarray:
        p = np.asarray(prompt_tokens)
        return np.asarray(self.prefill_cost.prefill_time(self.prefill_dp, p), float) * np.ones(
            p.shape)

    def transfer_ms(self, prompt_tokens) -> np.ndarray:
        p = np.asarray(prompt_tokens)
        return np.asarray(transfer_ms(self.model, p, self.link, self.prefill_tp, self.decode_tp),
                          float) * np.ones(p.shape)

    def __call__(self, requests, groups, deployments, row_dep, limits, max_gamma):
        return DisaggEngine(requests, groups, deployments, row_dep, limits, max_gamma, self)


class DisaggEngine(NumpyEngine):
    """The numpy serving engine of one decode worker per row, each row with its own prefill
    pool in front (module docstring)."""

    def __init__(self, requests, groups, deployments, row_dep, limits, max_gamma,
                 pool: PrefillPool):
        super().__init__(requests, groups, deployments, row_dep, limits, max_gamma)
        valid = np.isfinite(requests.arrival_s)
        prompts = np.where(valid, requests.prompt_tokens, 1)
        self.pool = pool
        self.service_ms = np.where(valid, pool.prefill_ms(prompts), 0.0)
        self.after_ms = np.where(valid, pool.transfer_ms(prompts), 0.0)
        self.queues = [FcfsServers(pool.servers) for _ in range(self.R)]
        self.send_ms = np.full(self.arrival_ms.shape, np.nan)
        self.prefill_busy_ms = np.zeros(self.R)
        for r in range(self.R):  # what is sent at the start (all of an open-loop row's)
            for k in range(int(self.released[r])):
                self.arrival_ms[r, k] = self._front(r, k, float(self.arrival_ms[r, k]))

    def _front(self, r: int, k: int, sent_ms: float) -> float:
        """Request k of row r sent at sent_ms: its arrival at the decode worker, ms."""
        self.send_ms[r, k] = sent_ms
        done = self.queues[r].serve(sent_ms, float(self.service_ms[r, k]))
        self.prefill_busy_ms[r] += self.service_ms[r, k]
        return done + self.after_ms[r, k]

    def release(self, rows, end_ms) -> None:
        """A closed-loop client's next request goes to the prefill pool first."""
        for r, t in zip(np.asarray(rows).tolist(), np.asarray(end_ms).tolist()):
            k = self.released[r]
            if self.closed[r] and k < self.n_req[r]:
                self.arrival_ms[r, k] = self._front(r, k, t)
                self.released[r] = k + 1

    def _result(self) -> DisaggResult:
        res = super()._result()
        valid = np.isfinite(self.rq.arrival_s)
        out = DisaggResult(**{f: getattr(res, f) for f in res.__dataclass_fields__})
        out.arrival_s = np.where(valid, self.send_ms * 1e-3, np.nan)
        out.prefill_busy_s = self.prefill_busy_ms * 1e-3
        out.prefill_servers = self.pool.servers
        return out


def pool_utilisation(result, rows) -> dict[str, np.ndarray]:
    """Per row: the prefill pool's utilisation (busy server time / (servers x makespan)) and the
    decode worker's (time in steps / makespan)."""
    makespan = result.makespan_s[rows]
    return {"prefill_utilisation": result.prefill_busy_s[rows]
            / (result.prefill_servers * makespan),
            "decode_utilisation": result.busy_s[rows] / makespan}
