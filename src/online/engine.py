"""The serving engine: open-loop arrivals, continuous batching, chunked prefill, paged KV cache.

One simulator for greedy and speculative serving. Many independent rows run side by side as rows
of [rows, slots] arrays (a row = one replication under one policy at one rate); each row has its
own clock. What one engine step does, per row (vLLM V1's scheduler, `vllm/v1/core/sched/
scheduler.py`, in the order it schedules):

1. The policy picks gamma for the step from the state at its start (batch = running sequences).
   gamma is capped so the decode/verification positions fit the token budget:
   n_decode (gamma + 1) <= max_num_batched_tokens.
2. Running sequences are scheduled first: each decoding one needs gamma + 1 positions and KV slots
   for them (speculation's lookahead slots); each one still in prefill takes the next chunk of its
   prompt from what is left of the token budget (slot order). If the KV blocks they need exceed
   the GPU's capacity, the most recently admitted running request is preempted (its KV freed; it
   goes back to the front of the queue and later recomputes prompt + tokens generated so far),
   repeatedly until the rest fit. vLLM's default preemption mode is recomputation.
3. If nothing was preempted, waiting requests are admitted first come, first served while a slot
   is free (running < max_num_seqs), token budget is left and the KV cache has blocks for their
   first chunk (chunked prefill: a long prompt is spread over several steps).
4. The step's time is the cost model's: the target pass over the decode/verification positions and
   the prefill chunks, plus the draft passes (src/online/steptime.py).
5. Each decoding sequence commits K + 1 tokens (K accepted drafts, geometric, capped at gamma,
   or the per-position law when the requests carry a hazard profile; K = 0 without speculation),
   capped at what it still needs; a sequence whose prompt prefill ends in this step samples its
   first token (its time to first token). Finished requests leave.

Between events nothing changes but the contexts: when a row has no prefill in progress and no
request it could admit, the engine advances it through a whole stretch of decode steps at once (up
to the next arrival, the first request to finish, or the KV cache filling up), computing every
step of the stretch exactly as single steps would (same draws: each request's j-th verification
uses draw j of its own counter-based stream, src/online/counter_rng.py). This is what makes low
rates cheap: there, most steps are such stretches.

Times are in ms inside the engine and in seconds at its edges (arrivals, results).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from src.acceptance import expected_tokens_per_step
from src.online.counter_rng import accepted_drafts
from src.online.steptime import StepTimer

# ITL histogram: log-spaced bins from 0.01 ms to 100 s, 200 per decade (about 1.2% wide)
ITL_BIN_EDGES_MS = np.logspace(-2, 5, 7 * 200 + 1)


@dataclass(frozen=True)
class EngineLimits:
    """Scheduler limits (vLLM names): defaults are vLLM V1's for an OpenAI-compatible server on a
    GPU with >= 70 GiB (H100, H200): max_num_seqs 1024, max_num_batched_tokens 8192
    (`EngineArgs.get_batch_defaults`, vllm/engine/arg_utils.py); KV block size 16 tokens."""

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    block_size_tokens: int = 16


@dataclass(frozen=True)
class Deployment:
    """One way of serving the model: the step-time model and the KV cache it leaves."""

    timer: StepTimer
    kv_capacity_blocks: int  # KV-cache blocks of block_size_tokens (target + draft caches)

    @property
    def speculative(self) -> bool:
        return self.timer.speculative


@dataclass(frozen=True)
class RequestTable:
    """Requests of every row, [rows, N]; rows with fewer requests pad with arrival_s = inf."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    alpha: np.ndarray  # per-token acceptance probability, 0 < alpha < 1
    key: np.ndarray  # uint64: the request's acceptance stream (src/online/counter_rng.py)
    # shape D_1..D_max_gamma of a per-position mode's acceptance (src/acceptance.py), shared by
    # every row; alpha is then each request's representative rate. None: i.i.d. acceptance.
    hazard_profile: np.ndarray | None = None

    @property
    def n_requests(self) -> np.ndarray:
        return np.isfinite(self.arrival_s).sum(axis=1)


@dataclass
class RowGroup:
    """Rows served under one policy: policy.gammas(view) decides their gamma each step."""

    policy: object
    rows: np.ndarray  # int row indices


@dataclass
class EngineResult:
    """Per request ([rows, N], NaN where no request) and per row ([rows]) outcomes; times in s."""

    arrival_s: np.ndarray
    first_scheduled_s: np.ndarray  # start of the first step that scheduled the request
    first_token_s: np.ndarray  # end of the step that sampled its first token
    finish_s: np.ndarray  # end of the step that committed its last token
    output_tokens: np.ndarray
    preemptions: np.ndarray  # times the request was preempted
    makespan_s: np.ndarray  # first arrival (0) to the last finish
    steps: np.ndarray  # engine steps
    busy_s: np.ndarray  # time the engine spent in steps
    running_integral_s: np.ndarray  # integral over time of the running (scheduled) sequences
    kv_integral_s: np.ndarray  # integral over time of the KV-cache fraction in use
    accepted_drafts: np.ndarray
    proposed_drafts: np.ndarray
    decode_steps_by_gamma: np.ndarray  # [rows, max_gamma + 1] steps that verified with gamma g
    itl_histogram: np.ndarray  # [rows, len(ITL_BIN_EDGES_MS) - 1] counts of inter-token gaps
    kv_capacity_blocks: np.ndarray


@dataclass
class PolicyView:
    """What a policy may look at when it picks gamma for its rows (all from the past). The slot
    state (context, accepted, tested, pooled_*) is None for a policy whose class sets
    `reads_slot_state = False` (one that looks at the batch size only)."""

    batch: np.ndarray  # [r] sequences running (decode + prefill) at the step's start
    decoding: np.ndarray  # [r, W] slot is decoding
    context: np.ndarray  # [r, W] cached tokens of each slot
    accepted: np.ndarray  # [r, W] drafts accepted so far by the slot's request
    tested: np.ndarray  # [r, W] drafts tested so far (accepted + rejections seen)
    pooled_accepted: np.ndarray  # [r] the same summed over every request of the row so far
    pooled_tested: np.ndarray  # [r]
    timer: StepTimer
    max_gamma: int  # the largest gamma the deployment runs


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


def _expected_tokens_per_step(alpha: np.ndarray, gamma: np.ndarray,
                              profile: np.ndarray | None) -> np.ndarray:
    """E[K + 1] of [m, w] slots at their row's gamma ([m]): the i.i.d. closed form, or
    1 + sum_{i <= gamma} alpha^(D_i) with a hazard profile (src.acceptance)."""
    if profile is None:
        return expected_tokens_per_step(alpha, gamma[:, None])
    top = int(gamma.max(initial=0))
    within = np.arange(1, top + 1) <= gamma[:, None, None]  # [m, 1, top]
    terms = np.exp(np.log(alpha)[:, :, None] * profile[:top])  # [m, w, top]
    return 1.0 + np.where(within, terms, 0.0).sum(axis=2)


def _ceil_div(a, b):
    return -(-a // b)


def percentile_75(x: np.ndarray) -> float:
    """np.percentile(x, 75) of a 1-D float array, bit for bit (its default linear method, the
    same operations), without np.percentile's general machinery (it costs ~100 us a call)."""
    s = np.sort(x)
    n = s.size
    virtual = (n - 1) * 0.75
    if virtual >= n - 1:
        lo = hi = n - 1
        frac = virtual + 1.0  # numpy's weight when both neighbours are the last value
    else:
        lo = int(np.floor(virtual))
        hi = lo + 1
        frac = virtual - lo
    a, b = s[lo], s[hi]
    diff = b - a
    if np.isnan(s[-1]):
        return float("nan")
    return float(b - diff * (1 - frac) if frac >= 0.5 else a + diff * frac)


class Engine:
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
        self.cap = np.array([deployments[d].kv_capacity_blocks for d in self.row_dep], np.int64)
        self.n_req = requests.n_requests
        longest = np.where(
            np.isfinite(requests.arrival_s), requests.prompt_tokens + requests.output_tokens, 0
        ).max(axis=1)
        if np.any(self.cap < _ceil_div(longest + max_gamma + 1, limits.block_size_tokens) + 1):
            raise ValueError("the KV cache cannot hold the longest request")
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
        self.stat = {k: np.zeros(R) for k in ("steps", "busy", "run_int", "kv_int", "acc", "prop")}
        self.gamma_steps = np.zeros((R, max_gamma + 1))
        self.itl = np.zeros((R, ITL_BIN_EDGES_MS.size - 1))
        self.last_step_ms = np.full(R, 10.0)  # the row's latest step time (stretch lengths)
        self.pool_acc = np.zeros(R)
        self.pool_tested = np.zeros(R)
        self.arrival_ms = requests.arrival_s * 1e3
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
                self._general_step(rows[general], gamma[general])
            iteration += 1
            if progress is not None and iteration % 2000 == 0:
                progress(int(live.sum()), R)
        return self._result()

    def _general_step(self, rows: np.ndarray, gamma: np.ndarray) -> None:
        """One engine step of each row (module docstring, steps 1-5)."""
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
            n_dec = decoding.sum(axis=1)
            g = np.minimum(gamma, np.maximum(budget // np.maximum(n_dec, 1) - 1, 0))
            left = budget - n_dec * (g + 1)
            want = np.where(in_pf, pf, 0)
            before = np.cumsum(want, axis=1) - want
            chunk = np.clip(np.minimum(want, left[:, None] - before), 0, None)
            ctx = s.ctx[rows]
            need = np.where(decoding, ctx + (g + 1)[:, None], ctx + chunk)
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
        can = ~preempted_any & (left > 0)
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
        self.stat["prop"] += np.bincount(R_rows, weights=gr, minlength=self.R)
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

    def generated_of(self, r, c) -> np.ndarray:
        """Tokens a running slot's request has generated so far."""
        s = self.s
        q = s.req[r, c]
        return self.rq.output_tokens[r, q] - s.rem[r, c]

    def _segment(self, rows, gamma, next_arrival_ms, free_slot) -> None:
        """Advance steady rows through a stretch of decode-only steps (module docstring)."""
        s, lim = self.s, self.limits
        bs = lim.block_size_tokens
        running = s.req[rows] >= 0
        n = running.sum(axis=1)
        w = 1
        while w < n.max():
            w *= 2
        w = min(w, s.W)
        order = np.argsort(~running, axis=1, kind="stable")[:, :w]  # running slots first
        m = rows.size
        act = running[np.arange(m)[:, None], order]
        R2 = np.broadcast_to(rows[:, None], order.shape)
        take = lambda a: a[R2, order]  # noqa: E731  (the slots in `order`, [m, w])
        ctx0, rem0, alpha, key, steps0 = (take(x) for x in (s.ctx, s.rem, s.alpha, s.key, s.steps))
        # how many steps to draw: enough for most rows to reach their next event (an arrival they
        # can admit, or a sequence finishing), predicted from the last step time and the expected
        # tokens per step; a row whose stretch is longer continues next iteration (any K gives
        # the same numbers, only the work differs)
        per_step = _expected_tokens_per_step(alpha, gamma, self.rq.hazard_profile)
        to_finish = np.where(act, rem0 / per_step, np.inf).min(axis=1)
        to_arrival = np.where(free_slot, (next_arrival_ms - self.clock[rows])
                              / np.maximum(self.last_step_ms[rows], 1e-3), np.inf)
        predicted = np.minimum(to_finish, to_arrival)
        K = int(min(max(1.25 * percentile_75(predicted) + 2, 1),
                    min(self.max_segment_steps, max(self.segment_work // (m * w), 1))))
        cap_steps = np.full(m, K)
        row_group = self.row_group[rows]
        for i, g_ in enumerate(self.groups):
            limit = getattr(g_.policy, "max_segment_steps", None)
            if limit is not None:
                cap_steps = np.where(row_group == i, np.minimum(cap_steps, limit), cap_steps)
        K = int(cap_steps.max())
        j = np.arange(K)
        gcol = gamma[:, None, None]
        k = accepted_drafts(key[:, :, None], steps0[:, :, None] + j, alpha[:, :, None], gcol,
                            self.rq.hazard_profile)
        tokens = np.cumsum(k + 1, axis=2)  # [m, w, K] committed after step j (uncapped)
        fin = (tokens >= rem0[:, :, None]) & act[:, :, None]
        any_fin = fin.any(axis=1)  # [m, K]
        first_fin = np.where(any_fin.any(axis=1), any_fin.argmax(axis=1), K)
        ctx_before = ctx0[:, :, None] + tokens - (k + 1)  # [m, w, K]
        demand = (_ceil_div(ctx_before + gcol + 1, bs) * act[:, :, None]).sum(axis=1)  # [m, K]
        kv_bad = demand > self.cap[rows][:, None]
        kv_limit = np.where(kv_bad.any(axis=1), kv_bad.argmax(axis=1), K)
        # step times of the stretch: [m * K] rows of [w] slots; steps from a row's kv_limit on
        # are cut below, and are priced at step 0's contexts: theirs need more KV cache than the
        # GPU holds, which the cost model's memory check refuses
        priced_ctx = np.where((j[None, :] < kv_limit[:, None])[:, None, :], ctx_before,
                              ctx_before[:, :, :1])

        def masks():
            return (np.broadcast_to(act[:, None, :], (m, K, w)).reshape(m * K, w),
                    priced_ctx.transpose(0, 2, 1).reshape(m * K, w))

        target_ms, draft_ms = self._step_ms(
            np.repeat(rows, K), np.repeat(n, K),
            (priced_ctx * act[:, :, None]).sum(axis=1).reshape(m * K), np.repeat(gamma, K), w,
            masks)
        times = (target_ms + draft_ms).reshape(m, K)
        ends = self.clock[rows][:, None] + np.cumsum(times, axis=1)
        crossed = (ends >= next_arrival_ms[:, None]) & free_slot[:, None]
        arr_limit = np.where(crossed.any(axis=1), crossed.argmax(axis=1) + 1, K)
        n_steps = np.minimum.reduce([cap_steps, first_fin + 1, arr_limit, kv_limit])
        n_steps = np.maximum(n_steps, 1)  # kv_limit >= 1: step 0 was checked by the caller
        in_seg = j[None, :] < n_steps[:, None]  # [m, K]
        last = n_steps - 1
        mi = np.arange(m)
        # apply: tokens, contexts, draws used, acceptance statistics
        done_tokens = np.minimum(tokens[mi[:, None], np.arange(w)[None, :], last[:, None]], rem0)
        spec = gamma > 0
        k_in = np.where(in_seg[:, None, :] & act[:, :, None], k, 0)
        acc_add = k_in.sum(axis=2) * spec[:, None]
        tested_add = (
            np.where(in_seg[:, None, :] & act[:, :, None], k + (k < gcol), 0).sum(axis=2)
            * spec[:, None]
        )
        put_r, put_c = R2[act], order[act]  # the running slots, row by row

        def put(a, v):
            a[put_r, put_c] = v[act]

        put(s.ctx, ctx0 + done_tokens)
        put(s.rem, rem0 - done_tokens)
        put(s.steps, steps0 + n_steps[:, None] * spec[:, None])
        put(s.acc, take(s.acc) + acc_add)
        put(s.tested, take(s.tested) + tested_add)
        acc_rows = acc_add.sum(axis=1)
        self.pool_acc[rows] += acc_rows
        self.pool_tested[rows] += tested_add.sum(axis=1)
        self.stat["acc"][rows] += acc_rows
        self.stat["prop"][rows] += gamma * n * n_steps
        # inter-token gaps: the first step's per sequence, then one per sequence per step
        end0 = ends[:, 0]
        last_emit = take(s.last_emit)
        first_gap = end0[:, None] - last_emit
        self._itl_add(put_r, first_gap[act])
        if (n_steps > 1).any():
            w_steps = np.where(in_seg & (j[None, :] > 0), n[:, None], 0).astype(float)
            self._itl_add(rows[:, None], times, w_steps)  # rows broadcast against [m, K]
        end_last = ends[mi, last]
        self.last_step_ms[rows] = times[mi, last]
        s.last_emit[put_r, put_c] = np.repeat(end_last, n)  # n running slots per row, in order
        seg_ms = np.where(in_seg, times, 0.0).sum(axis=1)
        self.stat["steps"][rows] += n_steps
        self.stat["busy"][rows] += seg_ms
        self.stat["run_int"][rows] += seg_ms * n
        cap = self.cap[rows]
        ctx_after = ctx0[:, :, None] + np.minimum(tokens, rem0[:, :, None])
        used = (_ceil_div(ctx_after, bs) * act[:, :, None]).sum(axis=1)  # blocks after each step
        self.stat["kv_int"][rows] += (
            np.where(in_seg, times * np.minimum(used, cap[:, None]), 0.0).sum(axis=1) / cap
        )
        np.add.at(self.gamma_steps, (rows, gamma), n_steps)
        self.clock[rows] = end_last
        # finished requests leave
        fr, fc = np.nonzero(act & (done_tokens >= rem0))
        if fr.size:
            r = rows[fr]
            c = order[fr, fc]
            q = s.req[r, c]
            self.finish[r, q] = end_last[fr] * 1e-3
            self.generated[r, q] = self.rq.output_tokens[r, q]
            self._leave(r, c)

    def _result(self) -> EngineResult:
        fin = self.finish
        valid = np.isfinite(self.rq.arrival_s)
        makespan = np.nanmax(np.where(valid, fin, np.nan), axis=1)
        return EngineResult(
            arrival_s=np.where(valid, self.rq.arrival_s, np.nan),
            first_scheduled_s=self.first_sched,
            first_token_s=self.first_token,
            finish_s=fin,
            output_tokens=np.where(valid, self.rq.output_tokens, 0),
            preemptions=self.preemptions,
            makespan_s=makespan,
            steps=self.stat["steps"],
            busy_s=self.stat["busy"] * 1e-3,
            running_integral_s=self.stat["run_int"] * 1e-3,
            kv_integral_s=self.stat["kv_int"] * 1e-3,
            accepted_drafts=self.stat["acc"],
            proposed_drafts=self.stat["prop"],
            decode_steps_by_gamma=self.gamma_steps,
            itl_histogram=self.itl,
            kv_capacity_blocks=self.cap,
        )
