"""The serving engine in numpy: many rows side by side as [rows, slots] arrays, one engine step of
every live row per iteration (or a stretch of decode steps, src/online/stretch.py).

The reference implementation of the model src/online/engine.py describes, and the engine for
what the compiled loop (src/online/engine_loop.py) does not price: a policy without a compiled
form (one that reads the slots and is neither `adaptive` nor a token tree).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from src.online.counter_rng import accepted_drafts
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
from src.online.stretch import _ceil_div, advance_stretch


@dataclass
class _State:
    W: int  # slot width of the arrays (grows up to max_num_seqs)
    req: np.ndarray  # [R, W] request index, -1 = empty
    ctx: np.ndarray  # [R, W] tokens in the KV cache (prompt computed so far + generated)
    pf: np.ndarray  # [R, W] prompt tokens still to prefill (> 0: in prefill)
    rem: np.ndarray  # [R, W] output tokens still to generate
    alpha: np.ndarray
    key: np.ndarray
    steps: np.ndarray  # [R, W] verification steps of the request (its draw counter)
    acc: np.ndarray  # [R, W] accepted drafts of the request
    tested: np.ndarray  # [R, W]
    last_emit: np.ndarray  # [R, W] ms, when the request last emitted a token
    admit_seq: np.ndarray  # [R, W] admission order (preemption picks the latest)
    extra: dict = field(default_factory=dict)


SLOT_FIELDS = {
    "req": (np.int64, -1),
    "ctx": (np.int64, 0),
    "pf": (np.int64, 0),
    "rem": (np.int64, 0),
    "alpha": (np.float64, 0.5),
    "key": (np.uint64, 0),
    "steps": (np.int64, 0),
    "acc": (np.int64, 0),
    "tested": (np.int64, 0),
    "last_emit": (np.float64, 0.0),
    "admit_seq": (np.int64, 0),
}


class NumpyEngine:
    """Simulate every row of `requests` to completion; see the module docstring."""

    def __init__(
        self,
        requests: RequestTable,
        groups: list[RowGroup],
        deployments: list[Deployment],
        row_deployment: np.ndarray,
        limits: EngineLimits,
        max_gamma: int,
        segment_work: int = 1 << 14,
        max_segment_steps: int = 256,
        allow_segments: bool = True,
    ):
        self.rq = requests
        self.groups = groups
        self.deployments = deployments
        self.row_dep = np.asarray(row_deployment)
        self.limits = limits
        self.max_gamma = max_gamma
        self.segment_work = segment_work
        self.max_segment_steps = max_segment_steps
        self.allow_segments = allow_segments
        self.decode_host = self._decode_host()
        R, N = requests.arrival_s.shape
        self.R, self.N = R, N
        self.row_group = np.full(R, -1)  # index into groups (compared as ints, not policies)
        for i, g in enumerate(groups):
            self.row_group[g.rows] = i
        # token-tree policies: each request's accepted-depth thresholds (src/treesim/serving.py)
        self.tree_tokens, self.tree_thr = np.zeros(R, np.int64), None
        if any(getattr(g.policy, "shape", None) is not None for g in groups):
            from src.treesim.serving import row_thresholds
            self.tree_tokens, self.tree_thr = row_thresholds(groups, requests, R, N)
        self.tree_row = self.tree_tokens > 0
        self.cap = np.array([deployments[d].kv_capacity_blocks for d in self.row_dep], np.int64)
        self.n_req = requests.n_requests
        longest = np.where(
            np.isfinite(requests.arrival_s), requests.prompt_tokens + requests.output_tokens, 0
        ).max(axis=1)
        positions = max(max_gamma + 1, int(self.tree_tokens.max(initial=0)))  # per step
        if np.any(self.cap < _ceil_div(longest + positions, limits.block_size_tokens) + 1):
            raise ValueError("the KV cache cannot hold the longest request")
        self.pf_first = np.array([deployments[d].prefill_first for d in self.row_dep], bool)
        check_prefill_first(longest, self.pf_first, limits)
        # per-request outcomes
        self.first_sched = np.full((R, N), np.nan)
        self.first_token = np.full((R, N), np.nan)
        self.finish = np.full((R, N), np.nan)
        self.generated = np.zeros((R, N), np.int64)  # kept for preempted requests
        self.req_steps = np.zeros((R, N), np.int64)
        self.req_acc = np.zeros((R, N), np.int64)
        self.req_tested = np.zeros((R, N), np.int64)
        self.req_last_emit = np.zeros((R, N))  # ms; kept while a request waits after preemption
        self.preemptions = np.zeros((R, N), np.int64)
        self.waiting_pre = np.zeros((R, N), bool)
        # per row
        self.clock = np.zeros(R)  # ms
        self.next_new = np.zeros(R, np.int64)
        self.n_pre_wait = np.zeros(R, np.int64)
        self.admit_counter = np.zeros(R, np.int64)
        self.stat = {k: np.zeros(R) for k in ("steps", "busy", "run_int", "kv_int", "acc", "prop",
                                                "slot")}
        self.gamma_steps = np.zeros((R, max_gamma + 1))
        self.itl = np.zeros((R, ITL_BIN_EDGES_MS.size - 1))
        self.last_step_ms = np.full(R, 10.0)  # the row's latest step time (stretch lengths)
        self.pool_acc = np.zeros(R)
        self.pool_tested = np.zeros(R)
        self.arrival_ms, self.released, self.closed = initial_arrivals_ms(requests)
        W = min(8, limits.max_num_seqs)
        self.s = _State(
            W=W, **{k: np.full((R, W), v, dtype=t) for k, (t, v) in SLOT_FIELDS.items()}
        )

    # -- helpers ------------------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        """Widen the slot arrays to hold `need` slots (powers of two up to max_num_seqs)."""
        s = self.s
        W = s.W
        while W < need:
            W *= 2
        W = min(W, self.limits.max_num_seqs)
        if W == s.W:
            return
        for k, (t, v) in SLOT_FIELDS.items():
            old = getattr(s, k)
            new = np.full((self.R, W), v, dtype=t)
            new[:, : s.W] = old
            setattr(s, k, new)
        s.W = W

    def _gammas(self, rows: np.ndarray, running: np.ndarray, decoding: np.ndarray) -> np.ndarray:
        """gamma per row from its policy (0 for rows of deployments without a draft)."""
        out = np.zeros(rows.size, np.int64)
        s = self.s
        row_group = self.row_group[rows]
        for i, g in enumerate(self.groups):
            sel = np.nonzero(row_group == i)[0] if len(self.groups) > 1 else np.arange(rows.size)
            if not sel.size:
                continue
            r = rows[sel]
            dep = self.deployments[self.row_dep[r[0]]]
            if not dep.speculative:
                continue
            slot_state = getattr(g.policy, "reads_slot_state", True)
            view = PolicyView(
                batch=running[sel].sum(axis=1),
                decoding=decoding[sel],
                context=s.ctx[r] if slot_state else None,
                accepted=s.acc[r] if slot_state else None,
                tested=s.tested[r] if slot_state else None,
                pooled_accepted=self.pool_acc[r] if slot_state else None,
                pooled_tested=self.pool_tested[r] if slot_state else None,
                timer=dep.timer,
                max_gamma=self.max_gamma,
            )
            out[sel] = np.clip(g.policy.gammas(view), 0, self.max_gamma)
        return out

    def _decode_host(self) -> int | None:
        """The one deployment with a draft, if every other one prices its steps (all at gamma 0)
        exactly as it does: then the decode part of a step is one call for all rows."""
        spec = [d for d, dep in enumerate(self.deployments) if dep.speculative]
        if len(self.deployments) < 2 or len(spec) != 1:
            return None
        host = self.deployments[spec[0]].timer
        others = (dep.timer for d, dep in enumerate(self.deployments) if d != spec[0])
        return spec[0] if all(host.same_target_pass(t) for t in others) else None

    def _step_ms(self, rows, n_dec, dec_ctx, gamma, width, masks, pf_sums=None):
        """(target + prefill ms, draft ms) per row of one step: n_dec decoding sequences over
        dec_ctx cached tokens ([r]) in `width` slots; masks() gives the [r, width] (decoding,
        context) arrays, asked only by a deployment whose step time needs every slot's
        context."""
        deps = self.row_dep[rows]
        if self.decode_host is not None:
            return self._shared_step_ms(deps, n_dec, dec_ctx, gamma, width, masks, pf_sums)
        target = np.zeros(rows.size)
        draft = np.zeros(rows.size)
        for d, dep in enumerate(self.deployments):
            if len(self.deployments) == 1:
                sel = slice(None)
            else:
                sel = np.nonzero(deps == d)[0]
                if not sel.size:
                    continue
            timer = dep.timer
            slots = masks() if timer.needs_slot_contexts else (None, None)
            t, dr = timer.decode_ms_totals(n_dec[sel], dec_ctx[sel], gamma[sel], width,
                                           *(None if x is None else x[sel] for x in slots))
            if pf_sums is not None:
                t = t + timer.prefill_extra_ms(
                    n_dec[sel], gamma[sel], dec_ctx[sel], *(x[sel] for x in pf_sums)
                )
            target[sel] = t
            draft[sel] = dr
        return target, draft

    def _shared_step_ms(self, deps, n_dec, dec_ctx, gamma, width, masks, pf_sums):
        """_step_ms with the decode part of every row in one call of the deployment with the
        draft (rows of the others are at gamma 0: the same numbers, see _decode_host); the
        memory checks and the prefill chunks per deployment."""
        host = self.deployments[self.decode_host].timer
        sels = [np.nonzero(deps == d)[0] for d in range(len(self.deployments))]
        for sel, dep in zip(sels, self.deployments):
            if sel.size:
                dep.timer.check_fits(n_dec[sel], dec_ctx[sel], gamma[sel])
        slots = masks() if host.needs_slot_contexts else (None, None)
        target, draft = host.decode_ms_totals(n_dec, dec_ctx, gamma, width, *slots,
                                              check_fits=False)
        draft[deps != self.decode_host] = 0.0  # no draft (its passes cost 0 at gamma 0 anyway)
        if pf_sums is not None:
            for sel, dep in zip(sels, self.deployments):
                if sel.size:
                    target[sel] = target[sel] + dep.timer.prefill_extra_ms(
                        n_dec[sel], gamma[sel], dec_ctx[sel], *(x[sel] for x in pf_sums))
        return target, draft

    def _itl_add(self, rows, gaps_ms, weights=None):
        """Add inter-token gaps of rows (rows broadcast against gaps_ms) to their histograms."""
        b = (
            np.searchsorted(
                ITL_BIN_EDGES_MS, np.maximum(gaps_ms, ITL_BIN_EDGES_MS[0]), side="right"
            )
            - 1
        )
        b = np.minimum(b, ITL_BIN_EDGES_MS.size - 2)
        flat = rows * self.itl.shape[1] + b
        # counts are whole numbers, so any order of adding them gives the same floats
        np.add.at(self.itl.reshape(-1), flat.ravel(), 1.0 if weights is None else weights.ravel())

    def _leave(self, r, c) -> None:
        """Write a slot's request state back to the request arrays and empty the slot."""
        s = self.s
        q = s.req[r, c]
        self.req_steps[r, q] = s.steps[r, c]
        self.req_acc[r, q] = s.acc[r, c]
        self.req_tested[r, q] = s.tested[r, c]
        self.req_last_emit[r, q] = s.last_emit[r, c]
        s.req[r, c] = -1
        s.rem[r, c] = 0
        s.pf[r, c] = 0
        s.ctx[r, c] = 0

    # -- the loop ------------------------------------------------------------------------------
    def run(self, progress=None) -> EngineResult:
        R = self.R
        live = np.ones(R, bool)
        iteration = 0
        while True:
            rows = np.nonzero(live)[0]
            if not rows.size:
                break
            hold = self._hold(rows)  # rows that wait for other rows' events (None: none)
            if hold is not None:
                rows = rows[~hold]
            s = self.s
            running = s.req[rows] >= 0
            n_run = running.sum(axis=1)
            nn = self.next_new[rows]
            has_new = nn < self.n_req[rows]
            head_arrival = np.where(
                has_new, self.arrival_ms[rows, np.minimum(nn, self.N - 1)], np.inf
            )
            idle = (n_run == 0) & (self.n_pre_wait[rows] == 0)
            finished = idle & ~has_new
            if finished.any():
                live[rows[finished]] = False
                keep = ~finished
                rows, running, n_run, head_arrival, idle = (
                    x[keep] for x in (rows, running, n_run, head_arrival, idle)
                )
                if not rows.size:
                    break
            # an idle row jumps to its next arrival
            self.clock[rows] = np.where(
                idle, np.maximum(self.clock[rows], head_arrival), self.clock[rows]
            )
            clock = self.clock[rows]
            in_pf = running & (s.pf[rows] > 0)
            decoding = running & ~in_pf
            gamma = self._gammas(rows, running, decoding)
            free_slot = n_run < self.limits.max_num_seqs
            admissible = (self.n_pre_wait[rows] > 0) | (head_arrival <= clock)
            steady = (n_run > 0) & ~in_pf.any(axis=1) & ~(admissible & free_slot)
            steady &= ~self.tree_row[rows]  # a tree's step draws its own depth: no stretches
            if steady.any() and self.allow_segments:
                bs = self.limits.block_size_tokens
                demand0 = (_ceil_div(s.ctx[rows] + (gamma + 1)[:, None], bs) * decoding).sum(axis=1)
                steady &= demand0 <= self.cap[rows]
            else:
                steady[:] = False
            if steady.any():
                self._segment(rows[steady], gamma[steady], head_arrival[steady], free_slot[steady])
            general = ~steady
            if general.any():
                self._general_steps(rows[general], gamma[general])
            iteration += 1
            if progress is not None and iteration % 2000 == 0:
                progress(int(live.sum()), R)
        return self._result()

    def _general_steps(self, rows: np.ndarray, gamma: np.ndarray) -> None:
        """One engine step of each row: chunked prefill, or under prefill-first scheduling a
        prefill-only step where a waiting prompt fits whole, else a decode step."""
        pff = self.pf_first[rows]
        if not pff.any():
            self._general_step(rows, gamma)
            return
        prefill = np.zeros(rows.size, bool)
        prefill[pff] = self._head_fits(rows[pff])
        for mode, sel in (("chunked", ~pff), ("prefill", prefill), ("decode", pff & ~prefill)):
            if sel.any():
                self._general_step(rows[sel], gamma[sel], mode)

    def _head_fits(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row's next waiting request (a preempted one first) has arrived, a free
        slot, and its whole prompt (+ tokens generated before a preemption) fits the token budget
        and the KV blocks the running sequences leave: a prefill-first row's prefill-only step."""
        s, lim = self.s, self.limits
        head = self.next_new[rows].copy()
        pre = self.n_pre_wait[rows] > 0
        if pre.any():
            head[pre] = self.waiting_pre[rows[pre]].argmax(axis=1)
        h = np.minimum(head, self.N - 1)
        ok = pre | ((head < self.n_req[rows]) & (self.arrival_ms[rows, h] <= self.clock[rows]))
        running = s.req[rows] >= 0
        ok &= running.sum(axis=1) < lim.max_num_seqs
        need = self.rq.prompt_tokens[rows, h] + self.generated[rows, h]
        ok &= need <= lim.max_num_batched_tokens
        bs = lim.block_size_tokens
        used = (_ceil_div(s.ctx[rows], bs) * running).sum(axis=1)
        return ok & (used + _ceil_div(need, bs) <= self.cap[rows])

    def _general_step(self, rows: np.ndarray, gamma: np.ndarray, mode: str = "chunked") -> None:
        """One engine step of each row (module docstring, steps 1-5). mode "prefill": whole
        waiting prompts only, no sequence decodes; "decode": no admission."""
        s, lim = self.s, self.limits
        bs = lim.block_size_tokens
        budget = lim.max_num_batched_tokens
        cap = self.cap[rows]
        start = self.clock[rows].copy()
        preempted_any = np.zeros(rows.size, bool)
        while True:  # schedule the running sequences; preempt until their KV blocks fit
            req = s.req[rows]
            running = req >= 0
            pf = s.pf[rows]
            in_pf = running & (pf > 0)
            decoding = running & ~in_pf
            if mode == "prefill":  # the running sequences wait for the prompts
                decoding = np.zeros_like(decoding)
            n_dec = decoding.sum(axis=1)
            g = np.minimum(gamma, np.maximum(budget // np.maximum(n_dec, 1) - 1, 0))
            # a token tree: N positions per decoding sequence, or no speculation where they
            # exceed the budget
            tokens = self.tree_tokens[rows]
            g = np.where((tokens > 0) & (gamma > 0),
                         np.where(n_dec * tokens <= budget, gamma, 0), g)
            if mode == "prefill":
                g = np.zeros_like(g)
            positions = np.where((tokens > 0) & (g > 0), tokens, g + 1)
            left = budget - n_dec * positions
            want = np.where(in_pf, pf, 0)
            before = np.cumsum(want, axis=1) - want
            chunk = np.clip(np.minimum(want, left[:, None] - before), 0, None)
            ctx = s.ctx[rows]
            need = np.where(decoding, ctx + positions[:, None], ctx + chunk)
            demand = (_ceil_div(need, bs) * running).sum(axis=1)
            over = demand > cap
            if not over.any():
                break
            # preempt the most recently admitted running request of each row over capacity
            o = np.nonzero(over)[0]
            seq = np.where(running[o], s.admit_seq[rows[o]], -1)
            c = seq.argmax(axis=1)
            r = rows[o]
            q = s.req[r, c]
            self.waiting_pre[r, q] = True
            self.n_pre_wait[r] += 1
            self.preemptions[r, q] += 1
            self.generated[r, q] = self.generated_of(r, c)
            self._leave(r, c)
            preempted_any[o] = True
        left = left - chunk.sum(axis=1)
        # admit waiting requests (first come, first served) into free slots
        new_chunk = np.zeros(rows.size, np.int64)
        admitted_slots = []
        can = ~preempted_any & (left > 0) & (mode != "decode")
        while can.any():
            a = np.nonzero(can)[0]
            r = rows[a]
            head = self.next_new[r].copy()
            pre = self.n_pre_wait[r] > 0
            if pre.any():  # preempted requests go first (they arrived before any waiting one)
                head[pre] = self.waiting_pre[r[pre]].argmax(axis=1)
            valid = pre | (
                (head < self.n_req[r])
                & (self.arrival_ms[r, np.minimum(head, self.N - 1)] <= start[a])
            )
            n_running = (s.req[r] >= 0).sum(axis=1)
            valid &= n_running < lim.max_num_seqs
            h = np.minimum(head, self.N - 1)
            prompt_need = self.rq.prompt_tokens[r, h] + self.generated[r, h]
            take = np.minimum(prompt_need, left[a])
            if mode == "prefill":  # whole prompts only
                valid &= take == prompt_need
            blocks = _ceil_div(take, bs)
            valid &= demand[a] + blocks <= cap[a]
            if not valid.any():
                break
            a, r, h, pre, take, blocks = (x[valid] for x in (a, r, h, pre, take, blocks))
            prompt_need = prompt_need[valid]
            free = s.req[r] < 0
            if not free.any(axis=1).all():  # some row has every slot of the arrays in use
                self._grow(s.W * 2)
                free = s.req[r] < 0
            c = free.argmax(axis=1)
            s.req[r, c] = h
            s.ctx[r, c] = 0
            s.pf[r, c] = prompt_need
            s.rem[r, c] = self.rq.output_tokens[r, h] - self.generated[r, h]
            s.alpha[r, c] = self.rq.alpha[r, h]
            s.key[r, c] = self.rq.key[r, h]
            s.steps[r, c] = self.req_steps[r, h]
            s.acc[r, c] = self.req_acc[r, h]
            s.tested[r, c] = self.req_tested[r, h]
            s.last_emit[r, c] = self.req_last_emit[r, h]
            s.admit_seq[r, c] = self.admit_counter[r]
            self.admit_counter[r] += 1
            self.first_sched[r, h] = np.where(
                np.isnan(self.first_sched[r, h]), start[a] * 1e-3, self.first_sched[r, h]
            )
            self.waiting_pre[r[pre], h[pre]] = False
            self.n_pre_wait[r[pre]] -= 1
            self.next_new[r[~pre]] += 1
            left[a] -= take
            demand[a] += blocks
            new_chunk[a] += take
            admitted_slots.append((a, c, take))
            can = np.zeros(rows.size, bool)
            can[a] = left[a] > 0
        # the step's composition: chunks of running prefills plus the admitted ones
        req = s.req[rows]
        W = s.W
        if chunk.shape[1] < W:
            chunk = np.pad(chunk, ((0, 0), (0, W - chunk.shape[1])))
            decoding = np.pad(decoding, ((0, 0), (0, W - decoding.shape[1])))
        for a, c, take in admitted_slots:
            chunk[a, c] = take
        ctx = s.ctx[rows]
        has_chunk = chunk > 0
        pf_after = s.pf[rows] - chunk
        completes = has_chunk & (pf_after == 0)
        pf_sums = (  # chunks, their tokens, their cached tokens, chunks completing a prompt
            has_chunk.sum(axis=1),
            chunk.sum(axis=1),
            (ctx * has_chunk).sum(axis=1),
            completes.sum(axis=1),
        )
        target_ms, draft_ms = self._step_ms(
            rows, np.count_nonzero(decoding, axis=1), (ctx * decoding).sum(axis=1), g, W,
            lambda: (decoding, ctx), pf_sums)
        step_ms = target_ms + draft_ms
        self.last_step_ms[rows] = np.where(step_ms > 0, step_ms, self.last_step_ms[rows])
        end = start + step_ms
        # outcomes of the decoding sequences
        rr, cc = np.nonzero(decoding)
        gr = g[rr]
        k = accepted_drafts(s.key[rows[rr], cc], s.steps[rows[rr], cc], s.alpha[rows[rr], cc], gr,
                            self.rq.hazard_profile)
        if self.tree_thr is not None:  # token trees: the depth from the same uniform
            tr = self.tree_row[rows[rr]] & (gr > 0)
            if tr.any():
                from src.online.counter_rng import uniform_open_closed
                rt, ct = rows[rr][tr], cc[tr]
                u = uniform_open_closed(s.key[rt, ct], s.steps[rt, ct])
                k = k.copy()
                k[tr] = (u[:, None] < self.tree_thr[rt, s.req[rt, ct]]).sum(axis=1)
        commit = np.minimum(k + 1, s.rem[rows[rr], cc])
        R_rows = rows[rr]
        spec = gr > 0
        tested = k + (k < gr)
        s.steps[R_rows, cc] += spec
        s.acc[R_rows, cc] += np.where(spec, k, 0)
        s.tested[R_rows, cc] += np.where(spec, tested, 0)
        np.add.at(self.pool_acc, R_rows[spec], k[spec])
        np.add.at(self.pool_tested, R_rows[spec], tested[spec])
        self.stat["acc"] += np.bincount(R_rows, weights=np.where(spec, k, 0), minlength=self.R)
        proposed = np.where(self.tree_row[R_rows] & spec, self.tree_tokens[R_rows] - 1, gr)
        self.stat["prop"] += np.bincount(R_rows, weights=proposed, minlength=self.R)
        s.ctx[R_rows, cc] += commit
        s.rem[R_rows, cc] -= commit
        self._itl_add(R_rows, end[rr] - s.last_emit[R_rows, cc])
        s.last_emit[R_rows, cc] = end[rr]
        # prefill chunks; a completed prompt samples a token
        pr, pc = np.nonzero(has_chunk)
        P_rows = rows[pr]
        s.ctx[P_rows, pc] += chunk[pr, pc]
        s.pf[P_rows, pc] -= chunk[pr, pc]
        done = s.pf[P_rows, pc] == 0
        dr, dc = P_rows[done], pc[done]
        q = s.req[dr, dc]
        first = self.generated[dr, q] == 0  # the request's first token (else a recompute's next)
        self.first_token[dr[first], q[first]] = end[pr[done]][first] * 1e-3
        if (~first).any():
            self._itl_add(dr[~first], end[pr[done]][~first] - s.last_emit[dr[~first], dc[~first]])
        s.last_emit[dr, dc] = end[pr[done]]
        s.rem[dr, dc] -= 1
        s.ctx[dr, dc] += 1
        # statistics, then finished requests leave
        n_sched = (s.req[rows] >= 0).sum(axis=1)
        blocks_used = (_ceil_div(np.where(s.req[rows] >= 0, s.ctx[rows], 0), bs)).sum(axis=1)
        self.stat["steps"][rows] += 1
        self.stat["busy"][rows] += step_ms
        self.stat["run_int"][rows] += step_ms * n_sched
        self.stat["slot"][rows] += n_sched
        self.stat["kv_int"][rows] += step_ms * np.minimum(blocks_used, cap) / cap
        has_dec = decoding.any(axis=1)
        np.add.at(self.gamma_steps, (rows[has_dec], g[has_dec]), 1)
        self.clock[rows] = end
        fr, fc = np.nonzero((s.req[rows] >= 0) & (s.rem[rows] <= 0))
        if fr.size:
            r = rows[fr]
            q = s.req[r, fc]
            self.finish[r, q] = end[fr] * 1e-3
            self.generated[r, q] = self.rq.output_tokens[r, q]
            self._leave(r, fc)
            self.release(r, end[fr])

    def generated_of(self, r, c) -> np.ndarray:
        """Tokens a running slot's request has generated so far."""
        s = self.s
        q = s.req[r, c]
        return self.rq.output_tokens[r, q] - s.rem[r, c]

    def release(self, rows, end_ms) -> None:
        """Closed-loop rows: each request finishing at end_ms[i] in row rows[i] lets its client
        send the row's next request at that time (requests in index order)."""
        for r, t in zip(np.asarray(rows).tolist(), np.asarray(end_ms).tolist()):
            k = self.released[r]
            if self.closed[r] and k < self.n_req[r]:
                self.arrival_ms[r, k] = t
                self.released[r] = k + 1

    def _hold(self, rows):
        return None  # rows do not interact (src/disagg/decode_router.py's do)

    def _segment(self, rows, gamma, next_arrival_ms, free_slot) -> None:
        advance_stretch(self, rows, gamma, next_arrival_ms, free_slot)

    def _result(self) -> EngineResult:
        fin = self.finish
        valid = np.isfinite(self.rq.arrival_s)
        makespan = np.nanmax(np.where(valid, fin, np.nan), axis=1)
        return EngineResult(
            arrival_s=sent_arrivals_s(self.rq, self.arrival_ms, self.closed),
            first_scheduled_s=self.first_sched,
            first_token_s=self.first_token,
            finish_s=fin,
            output_tokens=np.where(valid, self.rq.output_tokens, 0),
            preemptions=self.preemptions,
            makespan_s=makespan,
            steps=self.stat["steps"],
            busy_s=self.stat["busy"] * 1e-3,
            running_integral_s=self.stat["run_int"] * 1e-3,
            slot_steps=self.stat["slot"],
            kv_integral_s=self.stat["kv_int"] * 1e-3,
            accepted_drafts=self.stat["acc"],
            proposed_drafts=self.stat["prop"],
            decode_steps_by_gamma=self.gamma_steps,
            itl_histogram=self.itl,
            kv_capacity_blocks=self.cap,
        )
