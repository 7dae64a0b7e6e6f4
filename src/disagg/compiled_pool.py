"""Which serving engine runs a disaggregated deployment's decode pool, and the compiled one.

Open loop (every request's send time known at the start), the prefill pool does not depend on
the decode workers: each request's arrival at its decode worker (the prefill queue, its pass
and the KV transfer, src/disagg/prefill_front.py) is computed before the engine runs, by the
same FcfsServers calls in the same send order as the numpy engines make (DisaggEngine,
RoutedDisaggEngine), and the decode workers' rows (one per worker per replication, src/disagg/
decode_router.py's spread) do not interact. So the compiled serving loop (src/online/
engine_compiled.py) runs them, with those arrivals in place of the requests' own and the
decode worker's steps priced with no prefill chunks (DecodePoolTimer.prefill_free: step_prices
adds no prefill_extra_ms) and, at attention DP > 1, with the worker's step correction
(src/attention_dp/worker.py: its context-free terms tabled by batch and gamma, the two attention
terms per step, step_prices.dp_correction_ms); the result is folded back as RoutedDisaggEngine
folds it, with each request's send time as its arrival.

The numpy engines stay where the compiled loop does not apply: closed-loop clients (a send
waits on a finish, so the prefill queue and the decode rows interact) and the policies the
compiled loop does not run (src/online/engine_compiled.py compiled_supported).
The two agree to rounding (tests/test_disagg_compiled.py: 1e-9 relative, as the aggregated
engines do), bar `adaptive`, which the compiled loop re-decides every step (src/online/
engine.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.disagg.decode_router import RoutedDisaggEngine, fold, spread_requests
from src.disagg.prefill_front import DisaggEngine, DisaggResult, PrefillPool
from src.online.engine_compiled import CompiledEngine, compiled_supported
from src.online.engine_types import RequestTable, RowGroup


def prefill_front_ms(pool: PrefillPool, requests: RequestTable, y: int):
    """(send_ms, arrival_ms at the decode worker, prefill busy ms per replication) of the
    open-loop `requests` spread over y decode workers per replication ([R y, n], [R y, n], [R]):
    RoutedDisaggEngine's sends, in send order, at y = 1 DisaggEngine's."""
    rq = spread_requests(requests, y)
    valid = np.isfinite(rq.arrival_s)
    prompts = np.where(valid, rq.prompt_tokens, 1)
    service = np.where(valid, pool.prefill_ms(prompts), 0.0)
    after = np.where(valid, pool.transfer_ms(prompts), 0.0)
    arrival = rq.arrival_s * 1e3
    send = np.full(arrival.shape, np.nan)
    arrival0 = requests.arrival_s * 1e3
    busy = np.zeros(arrival0.shape[0])
    for rep, n in enumerate(requests.n_requests.astype(np.int64).tolist()):
        q = pool.queue()
        for k in range(n):
            row, i = rep * y + k % y, k // y
            send[row, i] = float(arrival0[rep, k])
            q.serve(float(send[row, i]), int(prompts[row, i]), float(service[row, i]), (row, i))
        for (row, i), done in q.settle():
            arrival[row, i] = done + after[row, i]
        busy[rep] = q.busy
    return send, arrival, busy


class CompiledDisaggEngine(CompiledEngine):
    """The compiled serving loop of y decode workers per replication behind its prefill pool,
    open loop (module docstring); arguments as RoutedDisaggEngine's."""

    def __init__(self, requests, groups, deployments, row_dep, limits, max_gamma,
                 pool: PrefillPool, workers: int = 1):
        y = self.y = workers
        self.rq0, self.pool = requests, pool
        wide = [RowGroup(g.policy, (np.asarray(g.rows)[:, None] * y + np.arange(y)).ravel())
                for g in groups]
        super().__init__(spread_requests(requests, y), wide, deployments,
                         np.repeat(np.asarray(row_dep), y), limits, max_gamma)
        self.send_ms, self.decode_arrival_ms, self.prefill_busy_ms = prefill_front_ms(
            pool, requests, y)

    def _initial_arrivals(self):
        R = self.decode_arrival_ms.shape[0]
        return self.decode_arrival_ms.copy(), self.rq.n_requests.astype(np.int64), \
            np.zeros(R, bool)

    def _result(self, out) -> DisaggResult:
        return fold(super()._result(out), self.y, self.rq0, self.send_ms, self.prefill_busy_ms,
                    self.pool.servers)


def compiled_applies(requests: RequestTable, groups, deployments) -> bool:
    """Whether the compiled loop runs this disaggregated run (module docstring)."""
    open_loop = requests.clients is None or not np.any(np.asarray(requests.clients) > 0)
    return open_loop and compiled_supported(groups, deployments)


@dataclass(frozen=True)
class DisaggEngines:
    """The engine factory (study.Prepared.make_engine) of `workers` decode workers behind
    `pool`: compiled where it applies, else numpy (module docstring); `compiled` False: numpy
    always (the reference), True: compiled or ValueError."""

    pool: PrefillPool
    workers: int = 1
    compiled: bool | None = None

    def __call__(self, requests, groups, deployments, row_dep, limits, max_gamma):
        ok = compiled_applies(requests, groups, deployments)
        use = ok if self.compiled is None else self.compiled
        if use:
            if not ok:
                raise ValueError("the compiled engine runs an open-loop decode pool under "
                                 "batch-size policies and adaptive")
            return CompiledDisaggEngine(requests, groups, deployments, row_dep, limits,
                                        max_gamma, self.pool, self.workers)
        if self.workers == 1:
            return DisaggEngine(requests, groups, deployments, row_dep, limits, max_gamma,
                                self.pool)
        return RoutedDisaggEngine(requests, groups, deployments, row_dep, limits, max_gamma,
                                  self.pool, self.workers)
