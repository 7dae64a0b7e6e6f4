"""The prefill pool in front of the decode worker's serving engine (`serve` on a [disagg]
deployment): its own first-come-first-served queue, then the KV transfer.

A request sent at time a (an open-loop arrival, or a closed-loop client's next request when its
last one finished on the decode worker) waits for a prefill server, c = prefill_workers x
prefill_dp servers (an attention-DP rank schedules its own prompts), and its KV cache then moves
to the decode worker in transfer_ms(P) (src/disagg/transfer.py).

Batched prefill (FcfsServers): a server that frees at time f starts one forward pass at
max(f, the next waiting request's send time) holding every request waiting by its start, in
send order, while their prompt tokens fit the server's token budget B (src/disagg/
prefill_budget.py: SGLang's chunked_prefill_size per DP rank, vLLM's max_num_batched_tokens); the
first request is always taken whole (a prompt longer than B runs alone in one pass: the prompt is
not chunked), and the first that does not fit waits for the next pass (strict FCFS: no later
request overtakes it). Taken in send order: a request joins the newest pass if that pass starts
no earlier than the request is sent and has room, else opens a new pass on the earliest-free
server; a request sent while a server is idle starts a pass of its own on it at once (so
requests sent together spread over idle servers first: four at once on two idle servers run
as one pass of one and one of three, on one server as one pass of four). A pass of prompts
P_1..P_n (T tokens) costs

    s = prefill_time(dp n prompts of T / n tokens)                 GEMMs over T rows: weights
        + sum_i attn(dp prompts of P_i) - attn(dp n prompts of T / n)  read once; attention per
                                                                     prompt (causal within it)

on the prefill worker's cost model (tp x dp GPUs; its dp ranks priced as all running passes of
the same make-up, as for one prompt), attn the cost model's attention kernel time
(src/costmodel/roofline.py attention_s); one prompt costs s(P) = prefill_time(dp prompts of P)
exactly as before batching. Every request of a pass finishes at its end:

    done = start + s(the pass);  arrival at decode = done + xfer(P)

A request that joins a pass lengthens it, so the pass's earlier requests' completions move too
(they are not yet at the decode worker: the pass has not started when the request is sent).
The decode worker (the engine, src/online/engine_numpy.py) takes requests in send order: where
a later-sent request's KV lands first (c > 1 with different prompt lengths), it waits behind the
earlier one (a head-of-line wait the fixed-length benchmarks never meet). The result's arrival
is the send time, so TTFT = prefill queue + pass + transfer + the decode worker's wait for a
slot and the step that takes the request in (when the prefill's first token is counted as
delivered); TPOT and ITL come from the decode worker's steps alone.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from src.costmodel.roofline import attention_s
from src.disagg.transfer import KvLink, transfer_ms
from src.online.engine_numpy import NumpyEngine
from src.online.engine_types import EngineResult


class FcfsServers:
    """`servers` first-come-first-served prefill servers batching waiting prompts into one pass
    up to `budget_tokens` (module docstring), taking requests in the order they are sent.
    price_ms(prompt tokens of a pass of two or more) -> the pass's service; a pass of one costs
    the `alone` its request brings (so a budget that holds one prompt is the one-at-a-time
    queue, float for float)."""

    def __init__(self, servers: int, budget_tokens: int = 0, price_ms=None):
        self._free = [0.0] * servers  # a heap of the servers' next free times, but the open pass's
        self.budget_tokens = budget_tokens
        self.price_ms = price_ms
        # the newest pass: [start, service, tokens, keys, prompts, repriced, index]
        self._open = None
        self._closed: list[list] = []  # passes closed since the last settle
        self.pass_service: list[float] = []  # every pass's service, in the order they start
        self.busy = 0.0  # their sum, added up as the passes come and grow

    def serve(self, sent: float, prompt_tokens: int, alone: float, key=None) -> None:
        """The request sent at `sent` joins a pass (module docstring); `alone` is its pass's
        service should it run alone. Its completion comes from settle()."""
        p = self._open
        idle = bool(self._free) and self._free[0] <= sent  # a server with nothing to do
        if (not idle and p is not None and p[0] >= sent
                and p[2] + prompt_tokens <= self.budget_tokens):
            p[3].append(key)
            p[4].append(prompt_tokens)
            p[2] += prompt_tokens
            p[5] = True  # priced when it closes or settles: one price per pass, not per join
            return
        if p is not None:
            self._price(p)
            heapq.heappush(self._free, p[0] + p[1])
            self._closed.append(p)
        start = max(sent, heapq.heappop(self._free))
        self._open = [start, alone, prompt_tokens, [key], [prompt_tokens], False,
                      len(self.pass_service)]
        self.pass_service.append(alone)
        self.busy += alone

    def _price(self, p: list) -> None:
        if p[5]:
            new = float(self.price_ms(p[4]))
            self.busy += new - p[1]
            p[1] = self.pass_service[p[6]] = new
            p[5] = False

    def settle(self) -> list:
        """[(key, done)] of every request of the passes closed since the last settle and of the
        newest pass, done its pass's end as it stands (a request joining the newest pass later
        moves it: settle again)."""
        out = []
        passes = self._closed + ([self._open] if self._open is not None else [])
        for p in passes:
            self._price(p)
            out.extend((k, p[0] + p[1]) for k in p[3])
        self._closed = []
        return out


def fcfs_latency_s(arrival_s, prompt_tokens, pool: "PrefillPool"):
    """(queue + pass + transfer per request, total pass time, last completion), seconds, of
    requests in arrival order at the pool's FcfsServers (the prefill pool alone, as plan
    searches it)."""
    arrival = np.asarray(arrival_s, float)
    prompts = np.asarray(prompt_tokens)
    alone_s = pool.prefill_ms(prompts) * 1e-3
    queue = pool.queue(scale=1e-3)
    done = np.zeros(arrival.shape)
    for k, (a, p, s) in enumerate(zip(arrival.tolist(), prompts.tolist(), alone_s.tolist())):
        queue.serve(a, p, s, k)
    for j, d in queue.settle():
        done[j] = d
    return (done - arrival + pool.transfer_ms(prompts) * 1e-3,
            float(np.sum(queue.pass_service)), float(done.max(initial=0.0)))


@dataclass
class DisaggResult(EngineResult):
    """EngineResult with the prefill pool's busy time per row (s), its server count and the
    decode workers whose busy times busy_s sums (src/disagg/decode_router.py)."""

    prefill_busy_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    prefill_servers: int = 1
    decode_workers: int = 1


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
    budget_tokens: int = 0  # prompt tokens per pass per server (src/disagg/prefill_budget.py)
    # batch_ms's GEMM part per (prompts, tokens) of a pass, filled as passes are priced
    _pass_ms: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def batch_ms(self, prompt_tokens) -> float:
        """One pass of prompts prompt_tokens on a server (module docstring), ms. Its GEMM part
        depends on the count and the total only: kept per (n, T) for the pool's life (a
        prefill pool's probes price ~10^4 passes, mostly of make-ups met before)."""
        p = np.asarray(prompt_tokens, float)
        n, dp = p.size, self.prefill_dp
        total = p.sum()
        key = (n, float(total))
        ms = self._pass_ms.get(key)
        if ms is None:
            ms = self._pass_ms[key] = float(self.prefill_cost.prefill_time(dp * n, total / n))
        if np.all(p == p[0]):
            return ms
        c = self.prefill_cost._target_c
        each = attention_s(c, np.full(n, dp), p, np.zeros(n), prefill=True)
        return ms + 1e3 * float(np.sum(each) - attention_s(c, dp * n, total / n, 0.0,
                                                          prefill=True))

    def queue(self, scale: float = 1.0) -> FcfsServers:
        """The pool's FcfsServers in units of scale x ms (1e-3: seconds); batch prices cached
        per pass make-up."""
        cache: dict[tuple, float] = {}

        def price(prompts) -> float:
            key = tuple(sorted(prompts))
            if key not in cache:
                cache[key] = self.batch_ms(key) * scale
            return cache[key]
        return FcfsServers(self.servers, self.budget_tokens, price)

    def prefill_ms(self, prompt_tokens) -> np.ndarray:
        """One prompt alone per prompt, ms: priced once per distinct length (the same
        elementwise numbers)."""
        p = np.asarray(prompt_tokens)
        if p.size == 0:
            return np.zeros(p.shape)
        lengths, where = np.unique(p, return_inverse=True)
        ms = np.asarray(self.prefill_cost.prefill_time(self.prefill_dp, lengths), float) \
            * np.ones(lengths.shape)
        return ms[where].reshape(p.shape)

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
        self.prompts = prompts
        self.service_ms = np.where(valid, pool.prefill_ms(prompts), 0.0)
        self.after_ms = np.where(valid, pool.transfer_ms(prompts), 0.0)
        self.queues = [pool.queue() for _ in range(self.R)]
        self.send_ms = np.full(self.arrival_ms.shape, np.nan)
        self.prefill_busy_ms = np.zeros(self.R)
        for r in range(self.R):  # what is sent at the start (all of an open-loop row's)
            for k in range(int(self.released[r])):
                self._front(r, k, float(self.arrival_ms[r, k]))
            self._settle(r)

    def _front(self, r: int, k: int, sent_ms: float) -> None:
        """Request k of row r sent at sent_ms goes to the row's prefill queue."""
        self.send_ms[r, k] = sent_ms
        self.queues[r].serve(sent_ms, int(self.prompts[r, k]), float(self.service_ms[r, k]), k)

    def _settle(self, r: int) -> None:
        """Row r's requests whose pass changed: their arrival at the decode worker, ms (a pass
        that grew has not started, so none of its requests has reached the decode worker)."""
        q = self.queues[r]
        for j, done in q.settle():
            self.arrival_ms[r, j] = done + self.after_ms[r, j]
        self.prefill_busy_ms[r] = q.busy

    def release(self, rows, end_ms) -> None:
        """A closed-loop client's next request goes to the prefill pool first."""
        sent = set()
        for r, t in zip(np.asarray(rows).tolist(), np.asarray(end_ms).tolist()):
            k = self.released[r]
            if self.closed[r] and k < self.n_req[r]:
                self._front(r, k, t)
                self.released[r] = k + 1
                sent.add(r)
        for r in sent:
            self._settle(r)

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
    decode pool's (time in steps / (decode workers x makespan): the mean over its workers)."""
    makespan = result.makespan_s[rows]
    decode = result.busy_s[rows] / makespan if result.decode_workers == 1 else \
        result.busy_s[rows] / (result.decode_workers * makespan)
    return {"prefill_utilisation": result.prefill_busy_s[rows]
            / (result.prefill_servers * makespan),
            "decode_utilisation": decode}
