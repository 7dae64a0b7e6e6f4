"""The compiled serving engine: packs requests, policies and step prices into arrays, runs the
numba loop (src/online/engine_loop.py) and returns the same EngineResult as the numpy engine.

`compiled_supported` says whether the loop can run a set of row groups and deployments: every
policy is either a batch-size policy (`reads_slot_state = False`: its gamma is a function of the
running sequences only, tabled here by calling its own `gammas` once for batch sizes 0..
max_num_seqs), `Adaptive`, or a token tree `FixedTree` (gamma S at every batch size; its rows
draw their accepted depth against the requests' P(K >= d), src/treesim/serving.row_thresholds,
the numpy engine's arrays), and src/online/step_prices.py prices every deployment (a tree's
TreeStepTimer included).
"""

from __future__ import annotations

import numpy as np

from src.online.engine_loop import POLICY_ADAPTIVE, POLICY_TABLE, run_rows, scratch
from src.online.engine_types import (
    ITL_BIN_EDGES_MS,
    Deployment,
    EngineLimits,
    EngineResult,
    PolicyView,
    RequestTable,
    RowGroup,
    check_prefill_first,
    initial_arrivals_ms,
    sent_arrivals_s,
)
from src.online.policies import Adaptive, FixedTree
from src.online.step_prices import compiled_pricing_supported, pack_prices


def compiled_supported(groups: list[RowGroup], deployments: list[Deployment]) -> bool:
    """Whether the compiled loop runs these policies and deployments (module docstring)."""
    policies_ok = all(isinstance(g.policy, (Adaptive, FixedTree))
                      or not getattr(g.policy, "reads_slot_state", True) for g in groups)
    return policies_ok and all(compiled_pricing_supported(d.timer) for d in deployments)


def _policy_tables(groups, deployments, row_dep, M, max_gamma):
    """(kind [G + 1], gamma table [G + 1, M + 1], adaptive params [G + 1, 3], row group of
    rows without one = G): group G is gamma 0 (a row no group names)."""
    n = len(groups)
    kind = np.full(n + 1, POLICY_TABLE, np.int64)
    table = np.zeros((n + 1, M + 1), np.int64)
    params = np.zeros((n + 1, 3))
    for i, g in enumerate(groups):
        p = g.policy
        if isinstance(p, Adaptive):
            kind[i] = POLICY_ADAPTIVE
            params[i] = (p.prior_alpha, p.prior_tokens, p.max_gamma)
            continue
        timer = deployments[row_dep[g.rows[0]]].timer if len(g.rows) else None
        batch = np.arange(M + 1)
        view = PolicyView(batch=batch, decoding=np.zeros((M + 1, 1), bool), context=None,
                          accepted=None, tested=None, pooled_accepted=None, pooled_tested=None,
                          timer=timer, max_gamma=max_gamma)
        table[i] = np.clip(np.asarray(p.gammas(view), np.int64), 0, max_gamma)
    return kind, table, params


class CompiledEngine:
    """Simulate every row of `requests` to completion in the compiled loop (arguments as
    src/online/engine.py's Engine)."""

    def __init__(self, requests: RequestTable, groups: list[RowGroup],
                 deployments: list[Deployment], row_deployment: np.ndarray,
                 limits: EngineLimits, max_gamma: int):
        self.rq = requests
        self.groups = groups
        self.deployments = deployments
        self.row_dep = np.asarray(row_deployment, np.int64)
        self.limits = limits
        self.max_gamma = max_gamma
        R, N = requests.arrival_s.shape
        self.tree_tokens, self.tree_thr = np.zeros(R, np.int64), np.zeros((1, 1, 1))
        if any(getattr(g.policy, "shape", None) is not None for g in groups):
            from src.treesim.serving import row_thresholds
            self.tree_tokens, self.tree_thr = row_thresholds(groups, requests, R, N)
        self.cap = np.array([deployments[d].kv_capacity_blocks for d in self.row_dep], np.int64)
        longest = np.where(np.isfinite(requests.arrival_s),
                           requests.prompt_tokens + requests.output_tokens, 0).max(axis=1)
        bs = limits.block_size_tokens
        positions = max(max_gamma + 1, int(self.tree_tokens.max(initial=0)))  # per step
        if np.any(self.cap < -(-(longest + positions) // bs) + 1):
            raise ValueError("the KV cache cannot hold the longest request")
        self.prefill_first = np.array([d.prefill_first for d in deployments], np.bool_)
        check_prefill_first(longest, self.prefill_first[self.row_dep], limits)
        self.row_group = np.full(R, len(groups), np.int64)
        for i, g in enumerate(groups):
            self.row_group[g.rows] = i

    def run(self, progress=None) -> EngineResult:
        rq, lim = self.rq, self.limits
        R, N = rq.arrival_s.shape
        M = lim.max_num_seqs
        kind, table, params = _policy_tables(self.groups, self.deployments, self.row_dep, M,
                                             self.max_gamma)
        max_tokens = lim.max_num_batched_tokens + max(lim.max_num_batched_tokens, M)
        prices = pack_prices([d.timer for d in self.deployments], M, self.max_gamma, max_tokens)
        profile = rq.hazard_profile
        out = {
            "first_sched": np.full((R, N), np.nan), "first_token": np.full((R, N), np.nan),
            "finish": np.full((R, N), np.nan), "preemptions": np.zeros((R, N), np.int64),
            "stats": np.zeros((R, 7)), "gamma_steps": np.zeros((R, self.max_gamma + 1)),
            "itl": np.zeros((R, ITL_BIN_EDGES_MS.size - 1)), "error": np.zeros((R, 4), np.int64),
        }
        arrival_ms, released, closed = self._initial_arrivals()
        self.arrival_ms, self.closed = arrival_ms, closed
        run_rows(prices, arrival_ms, released, closed, np.asarray(rq.prompt_tokens, np.int64),
                 np.asarray(rq.output_tokens, np.int64), np.asarray(rq.alpha, float),
                 np.asarray(rq.key, np.uint64), rq.n_requests.astype(np.int64), self.row_dep,
                 self.cap, self.row_group, kind, table, params, self.prefill_first,
                 self.max_gamma, M,
                 lim.max_num_batched_tokens, lim.block_size_tokens,
                 np.zeros(0) if profile is None else np.asarray(profile, float),
                 profile is not None, self.tree_tokens, self.tree_thr, ITL_BIN_EDGES_MS,
                 *out.values(), *scratch(M, N, self.max_gamma))
        if progress is not None:
            progress(0, R)
        bad = np.nonzero(out["error"][:, 0])[0]
        if bad.size:  # the cost model's own error for the step it refuses
            n, C, g = out["error"][bad[0], 1:]
            self.deployments[self.row_dep[bad[0]]].timer.check_fits(
                np.array([n]), np.array([C]), np.array([g]))
            raise RuntimeError("a compiled step failed the memory check the cost model passes")
        return self._result(out)

    def _initial_arrivals(self):
        """(arrival_ms, released, closed) at the start (engine_types.initial_arrivals_ms); a
        subclass may put its own arrivals in (src/disagg/compiled_pool.py: each request's
        arrival at the decode worker after the prefill pool)."""
        return initial_arrivals_ms(self.rq)

    def _result(self, out) -> EngineResult:
        rq = self.rq
        fin = out["finish"]
        valid = np.isfinite(rq.arrival_s)
        stats = out["stats"]
        return EngineResult(
            arrival_s=sent_arrivals_s(rq, self.arrival_ms, self.closed),
            first_scheduled_s=out["first_sched"],
            first_token_s=out["first_token"],
            finish_s=fin,
            output_tokens=np.where(valid, rq.output_tokens, 0),
            preemptions=out["preemptions"],
            makespan_s=np.nanmax(np.where(valid, fin, np.nan), axis=1),
            steps=stats[:, 0].copy(),
            busy_s=stats[:, 1] * 1e-3,
            running_integral_s=stats[:, 2] * 1e-3,
            slot_steps=stats[:, 6].copy(),
            kv_integral_s=stats[:, 3] * 1e-3,
            accepted_drafts=stats[:, 4].copy(),
            proposed_drafts=stats[:, 5].copy(),
            decode_steps_by_gamma=out["gamma_steps"],
            itl_histogram=out["itl"],
            kv_capacity_blocks=self.cap,
        )
