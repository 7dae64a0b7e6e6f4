"""`serve` on a disaggregated deployment with y = decode_workers > 1: the requests of one
replication dispatched round-robin over y decode workers behind one shared prefill pool.

Dispatch: request k (send order = index order: open-loop arrivals are sorted, closed-loop
clients send in index order) goes to decode worker k mod y, as Dynamo's frontend routes by
default (`--router-mode` default "round-robin", ai-dynamo/dynamo components/src/dynamo/frontend/
frontend_args.py). SGLang's PD router picks the decode worker with its main policy unless
--decode-policy is given (sgl-router/src/policies/registry.rs get_decode_policy; router_args.py
policy default "cache_aware"); cache_aware on prompts that share no prefix, load balanced,
routes to the worker whose approximate radix tree holds the fewest characters
(sgl-router/src/policies/cache_aware.rs), which for prompts of one length alternates as
round-robin does. Where lengths vary, or a worker falls 64 requests and 1.5x behind, SGLang
balances by load instead; that is not modelled.

The engine: each replication becomes y engine rows (row r y + j holds requests j, j + y, ...);
the prefill pool (src/disagg/prefill_front.py FcfsServers) is one per replication, fed in send
order by all its workers' requests, so the prefill stream is the one-worker run's. Open loop:
every send is known at the start, the rows do not interact. Closed loop: a client's next
request is sent when any of the replication's requests finishes, on whichever worker, so the
rows are simulated jointly by conservative synchronisation (Chandy & Misra 1979):

    L_j   the earliest time row j can next act: its clock if it holds work, else its next
          known arrival (inf if none)
    send  a finish at t waits in its replication's queue until t <= min_j L_j (no row can
          finish earlier any more), then sends the next request: finishes reach the prefill
          pool in time order, as in one row
    step  row j starts a step at L_j only if L_j <= H_j = min(next queued finish, min_{k != j}
          L_k) + lookahead, lookahead = the replication's shortest prefill pass + shortest
          KV transfer (a request sent at t reaches a decode worker no earlier than t +
          lookahead, and a pass it joins ends no earlier either); a stretch of decode steps
          (src/online/stretch.py) with a free slot stops at H_j

so every step starts knowing every arrival before its start, exactly as the one-row engine. A
pass's price is assumed to grow with the prompts it holds (prefill_front batch_ms does).

Folding back (one result per replication, the caller's row and request indices): per-request
arrays re-indexed; steps, busy and integrals, drafts, gamma counts and ITL counts summed over
the workers; makespan the maximum (the last finish); decode utilisation (pool_utilisation) the
mean over workers (busy / (y x makespan)); serving.csv's busy_fraction and mean_running stay
the pool's sums (busy worker-seconds and running requests per second of makespan, Little's law
over the pool); mean_batch and kv_use their busy-weighted mean per worker; kv_capacity_blocks
one worker's.
"""
from __future__ import annotations

import heapq

import numpy as np

from src.disagg.prefill_front import DisaggEngine, DisaggResult, PrefillPool
from src.online.engine_numpy import NumpyEngine
from src.online.engine_types import RequestTable, RowGroup
from src.online.stretch import advance_stretch


def spread(a: np.ndarray, y: int, fill) -> np.ndarray:
    """[R, N] per request -> [R y, ceil(N / y)]: row r y + j holds requests j, j + y, ..."""
    R, N = a.shape
    n = -(-N // y)
    out = np.full((R, n * y), fill, dtype=a.dtype)
    out[:, :N] = a
    return out.reshape(R, n, y).transpose(0, 2, 1).reshape(R * y, n)


def gather(a: np.ndarray, y: int, N: int) -> np.ndarray:
    """spread's inverse: [R y, n] -> [R, N]."""
    Ry, n = a.shape
    return a.reshape(Ry // y, y, n).transpose(0, 2, 1).reshape(Ry // y, n * y)[:, :N]


def spread_requests(rq: RequestTable, y: int) -> RequestTable:
    return RequestTable(
        arrival_s=spread(rq.arrival_s, y, np.inf), prompt_tokens=spread(rq.prompt_tokens, y, 1),
        output_tokens=spread(rq.output_tokens, y, 1), alpha=spread(rq.alpha, y, 0.5),
        key=spread(rq.key, y, np.uint64(0)), hazard_profile=rq.hazard_profile,
        clients=None if rq.clients is None else np.repeat(rq.clients, y))


class RoutedDisaggEngine(DisaggEngine):
    """The numpy serving engine of y decode workers per replication (module docstring)."""

    def __init__(self, requests, groups, deployments, row_dep, limits, max_gamma,
                 pool: PrefillPool, workers: int):
        y = self.y = workers
        self.R0, self.N0 = requests.arrival_s.shape
        self.rq0 = requests
        wide = [RowGroup(g.policy, (np.asarray(g.rows)[:, None] * y + np.arange(y)).ravel())
                for g in groups]
        NumpyEngine.__init__(self, spread_requests(requests, y), wide, deployments,
                             np.repeat(np.asarray(row_dep), y), limits, max_gamma)
        valid = np.isfinite(self.rq.arrival_s)
        self.pool = pool
        self.prompts = np.where(valid, self.rq.prompt_tokens, 1)
        self.service_ms = np.where(valid, pool.prefill_ms(self.prompts), 0.0)
        self.after_ms = np.where(valid, pool.transfer_ms(self.prompts), 0.0)
        self.queues = [pool.queue() for _ in range(self.R0)]
        self.send_ms = np.full(self.arrival_ms.shape, np.nan)
        self.prefill_busy_ms = np.zeros(self.R0)
        n0 = requests.n_requests.astype(np.int64)
        clients = (np.zeros(self.R0, np.int64) if requests.clients is None
                   else np.asarray(requests.clients, np.int64))
        rep_closed = clients > 0
        self.closed = np.repeat(rep_closed, y)
        self.rep_n = n0
        self.rep_sent = np.where(rep_closed, np.minimum(clients, n0), n0)
        self.arrival_ms = np.where(self.closed[:, None] & valid, np.inf, self.arrival_ms)
        self.horizon = np.full(self.R, np.inf)
        self.waiting = [[] for _ in range(self.R0)]  # finishes not yet sent on: (t, seq)
        self.seq = 0
        with np.errstate(invalid="ignore"):
            first = np.where(valid, self.service_ms, np.inf).reshape(self.R0, -1).min(axis=1)
            xfer = np.where(valid, self.after_ms, np.inf).reshape(self.R0, -1).min(axis=1)
        self.lookahead = np.where(np.isfinite(first + xfer), first + xfer, 0.0)
        arrival0 = requests.arrival_s * 1e3
        for rep in range(self.R0):
            for k in range(int(self.rep_sent[rep])):
                self._send(rep, k, 0.0 if rep_closed[rep] else float(arrival0[rep, k]))
            self._settle_rep(rep)

    def _send(self, rep: int, k: int, sent_ms: float) -> None:
        row, i = rep * self.y + k % self.y, k // self.y
        self.send_ms[row, i] = sent_ms
        self.queues[rep].serve(sent_ms, int(self.prompts[row, i]),
                               float(self.service_ms[row, i]), (row, i))

    def _settle_rep(self, rep: int) -> None:
        q = self.queues[rep]
        for (row, i), done in q.settle():
            self.arrival_ms[row, i] = done + self.after_ms[row, i]
        self.prefill_busy_ms[rep] = q.busy

    def release(self, rows, end_ms) -> None:
        """A finish waits until no worker of its replication can finish earlier."""
        for r, t in zip(np.asarray(rows).tolist(), np.asarray(end_ms).tolist()):
            if self.closed[r]:
                heapq.heappush(self.waiting[r // self.y], (t, self.seq))
                self.seq += 1

    def _earliest(self, rows: np.ndarray) -> np.ndarray:
        """L_j of `rows` (module docstring)."""
        s = self.s
        work = (s.req[rows] >= 0).any(axis=1) | (self.n_pre_wait[rows] > 0)
        nn = self.next_new[rows]
        head = np.where(nn < self.n_req[rows],
                        self.arrival_ms[rows, np.minimum(nn, self.N - 1)], np.inf)
        return np.where(work, self.clock[rows], np.maximum(self.clock[rows], head))

    def _hold(self, rows):
        """Rows of closed-loop replications that must wait (module docstring); sends the
        finishes that can be sent first."""
        if not self.closed.any():
            return None
        y = self.y
        L = self._earliest(np.arange(self.R)).reshape(self.R0, y)
        for rep in np.nonzero([bool(w) for w in self.waiting])[0].tolist():
            w = self.waiting[rep]
            band = np.arange(rep * y, rep * y + y)
            while w and w[0][0] <= L[rep].min():
                t, _ = heapq.heappop(w)
                k = int(self.rep_sent[rep])
                if k < self.rep_n[rep]:
                    self._send(rep, k, t)
                    self.rep_sent[rep] = k + 1
                    self._settle_rep(rep)
                    L[rep] = self._earliest(band)
        order = np.sort(L, axis=1)
        low = L.argmin(axis=1)
        second = order[:, 1] if y > 1 else np.full(self.R0, np.inf)
        others = np.where(np.arange(y)[None, :] == low[:, None], second[:, None],
                          order[:, :1])
        nxt = np.array([w[0][0] if w else np.inf for w in self.waiting])
        H = np.minimum(others, nxt[:, None]) + self.lookahead[:, None]
        closed = self.closed.reshape(self.R0, y)
        self.horizon = np.where(closed, H, np.inf).ravel()
        nn = self.next_new.reshape(self.R0, y)
        waits = ~np.isfinite(L) & (nn < self.n_req.reshape(self.R0, y))  # for a send
        hold = (closed & (waits | (L > H))).ravel()[rows]
        if hold.all():
            raise RuntimeError("every decode worker waits for another (a synchronisation bug)")
        return hold

    def _segment(self, rows, gamma, next_arrival_ms, free_slot) -> None:
        advance_stretch(self, rows, gamma, np.minimum(next_arrival_ms, self.horizon[rows]),
                        free_slot)

    def _result(self) -> DisaggResult:
        return fold(NumpyEngine._result(self), self.y, self.rq0, self.send_ms,
                    self.prefill_busy_ms, self.pool.servers)


def fold(res, y: int, rq0: RequestTable, send_ms, prefill_busy_ms, servers: int) -> DisaggResult:
    """The result of the y-row engine `res` folded back to one row per replication (module
    docstring): rq0 the replications' requests, send_ms each spread request's send time."""
    R0, N0 = rq0.arrival_s.shape
    valid = np.isfinite(rq0.arrival_s)

    def total(a):
        a = np.asarray(a)
        return a.reshape(R0, y, *a.shape[1:]).sum(axis=1)

    fin = gather(res.finish_s, y, N0)
    return DisaggResult(
        arrival_s=np.where(valid, gather(send_ms, y, N0) * 1e-3, np.nan),
        first_scheduled_s=gather(res.first_scheduled_s, y, N0),
        first_token_s=gather(res.first_token_s, y, N0),
        finish_s=fin,
        output_tokens=np.where(valid, rq0.output_tokens, 0),
        preemptions=gather(res.preemptions, y, N0),
        makespan_s=np.nanmax(np.where(valid, fin, np.nan), axis=1),
        steps=total(res.steps), busy_s=total(res.busy_s),
        running_integral_s=total(res.running_integral_s),
        kv_integral_s=total(res.kv_integral_s), accepted_drafts=total(res.accepted_drafts),
        proposed_drafts=total(res.proposed_drafts),
        decode_steps_by_gamma=total(res.decode_steps_by_gamma),
        itl_histogram=total(res.itl_histogram),
        kv_capacity_blocks=res.kv_capacity_blocks[::y], slot_steps=total(res.slot_steps),
        prefill_busy_s=prefill_busy_ms * 1e-3, prefill_servers=servers, decode_workers=y)
