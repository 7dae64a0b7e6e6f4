"""Serving R independent replications of a queue of requests: slots, queue, serving mode, clock.

Each replication serves its own queue of N requests, all present at time 0 (an offline batch
workload), on B slots (B = batch size):

* static_batch: requests are taken B at a time; a batch starts together and the next batch is
  admitted only once every slot is empty, so finished slots idle until the batch's last request
  ends.
* continuous_refill: a slot freed at a step takes the next queued request before the next step
  (Orca-style iteration-level scheduling, Yu et al. 2022).

Two stages. src/step_engine.py runs the loop in step space (which request is active at which step
and what it commits: the decoder, the acceptance draws and the serving mode decide this, never the
step times). Then `price_steps` hands every step's totals (active sequences, summed context) to the
cost model in one vectorised call and adds up the clock: makespan, latencies, time shares.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.workload import Requests

DECODERS = ("greedy", "ragged", "lockstep")  # codes 0, 1, 2 of src.step_engine


@dataclass(frozen=True)
class RunStats:
    """Per-replication totals of one serving run; every array is [R]."""

    makespan: np.ndarray  # time until the replication's last request finished
    steps: np.ndarray  # decoding steps (each one target pass)
    active_slot_steps: np.ndarray  # sum over steps of active slots
    committed_tokens: np.ndarray  # tokens generated (= sum of output lengths)
    accepted_drafts: np.ndarray
    proposed_drafts: np.ndarray
    draft_time: np.ndarray
    verify_time: np.ndarray
    rejected_draft_time: np.ndarray
    latency_sum: np.ndarray  # sum over requests of (finish - admission) time
    requests: int  # requests per replication


@dataclass(frozen=True)
class StepRecord:
    """What src.step_engine recorded; steps are stored back to back, replication after
    replication."""

    first_step: np.ndarray  # [R, N] flat index of each request's first step
    last_step: np.ndarray  # [R, N] flat index of each request's last step
    rep_first_step: np.ndarray  # [R] flat index of each replication's first step
    rep_steps: np.ndarray  # [R] steps of each replication
    rep_slot_steps: np.ndarray  # [R] sum over steps of active sequences
    rep_kept_share: np.ndarray  # [R] sum over steps of (committed tokens - active) / active
    accepted_drafts: np.ndarray  # [R]
    # per step, only when asked for (a cost model whose step times vary needs them)
    seqs: np.ndarray | None = None  # [T] active sequences at each step
    tokens: np.ndarray | None = None  # [T] tokens committed at each step
    context: np.ndarray | None = None  # [T] summed context of the active sequences before the step
    draft_mid_context: np.ndarray | None = None  # [T] draft KV budget b: sum min(ctx + (g-1)/2, b)
    draft_start_context: np.ndarray | None = None  # [T] draft KV budget b: sum min(ctx, b)


@dataclass(frozen=True)
class StepBuffers:
    """The output arrays a compiled step loop (src/step_engine.py run_steps, src/treesim/loop.py
    run_tree_steps) fills, in the order those loops take them, and the StepRecord made of them."""
    budget: int  # the draft KV budget in tokens, -1 for none
    seqs: np.ndarray
    tokens: np.ndarray
    context: np.ndarray
    mid: np.ndarray
    start: np.ndarray
    first_step: np.ndarray
    last_step: np.ndarray
    rep_first: np.ndarray
    rep_steps: np.ndarray
    rep_slot_steps: np.ndarray
    kept_share: np.ndarray
    accepted: np.ndarray

    @classmethod
    def allocate(cls, output_len: np.ndarray, store_steps: bool,
                 draft_budget_tokens: int | None) -> "StepBuffers":
        R, N = output_len.shape
        capacity = int(output_len.sum()) if store_steps else 0  # each step commits >= 1 token
        budget = -1 if draft_budget_tokens is None else int(draft_budget_tokens)
        with_budget = capacity if budget >= 0 else 0
        return cls(budget, np.empty(capacity, np.int32), np.empty(capacity, np.int32),
                   np.empty(capacity, np.int64), np.empty(with_budget), np.empty(with_budget),
                   np.empty((R, N), np.int64), np.empty((R, N), np.int64),
                   *(np.empty(R, np.int64) for _ in range(3)), np.empty(R), np.empty(R, np.int64))

    def loop_arrays(self) -> tuple:
        """The arrays after the loop's store_steps argument, in its order."""
        return (self.seqs, self.tokens, self.context, self.mid, self.start, self.first_step,
                self.last_step, self.rep_first, self.rep_steps, self.rep_slot_steps,
                self.kept_share, self.accepted)

    def record(self, n_steps: int, store_steps: bool) -> StepRecord:
        """The StepRecord of a loop that ran n_steps steps in all."""
        per_step = {}
        if store_steps:
            T = n_steps
            per_step = dict(seqs=self.seqs[:T], tokens=self.tokens[:T], context=self.context[:T])
            if self.budget >= 0:
                per_step.update(draft_mid_context=self.mid[:T], draft_start_context=self.start[:T])
        return StepRecord(self.first_step, self.last_step, self.rep_first, self.rep_steps,
                          self.rep_slot_steps, self.kept_share, self.accepted, **per_step)


def simulate_steps(requests: Requests, batch_size: int, serving_mode: str, decoder: str,
                   gamma: int = 0, rng: np.random.Generator | None = None,
                   store_steps: bool = True, draft_budget_tokens: int | None = None) -> StepRecord:
    """Run the step-space loop (src/step_engine.py) for every replication of `requests`."""
    from src import step_engine  # imports numba: only when something is simulated, not for --help
    output_len = np.ascontiguousarray(requests.output_len_tokens, dtype=np.int64)
    prompt_len = np.ascontiguousarray(requests.prompt_len_tokens, dtype=np.int64)
    alpha = np.ascontiguousarray(requests.alpha, dtype=np.float64)
    if decoder == "greedy":
        rng = rng or np.random.default_rng(0)  # not drawn from
    hazard_scale = -np.log(alpha)
    profile = np.empty(0) if requests.hazard_profile is None or decoder == "greedy" else (
        np.ascontiguousarray(requests.hazard_profile[:gamma], dtype=np.float64))
    buf = StepBuffers.allocate(output_len, store_steps, draft_budget_tokens)
    T = step_engine.run_steps(
        rng, DECODERS.index(decoder), serving_mode == "continuous_refill",
        batch_size, gamma, profile, output_len, prompt_len, hazard_scale, buf.budget,
        (gamma - 1) * 0.5, store_steps, *buf.loop_arrays())
    return buf.record(T, store_steps)


# seconds of one core that numba takes to compile the study's step loop into an empty cache
# (src/step_engine.py run_steps and the acceptance draw it calls), 2-core machine, 2026-12-02
STEP_LOOP_COMPILE_S = 6.0


def compile_step_loop_once(say=lambda msg: None, load: bool = True) -> bool:
    """Compile the study's step loop here, once, if numba's cache does not hold it yet
    (src/compiled_cache.py `compile_once`): a ragged chain of 2 drafts over 2 requests of
    3 tokens, whose arguments have the types of every chain run's. Returns whether it compiled.
    With `load`, a warm cache is also loaded into this process (the same tiny run): the worker
    processes it forks then inherit the machine code instead of each loading it again (about
    0.7 s of CPU per process, 2026-12-04, this 2-core machine)."""
    import os

    from src import step_engine
    from src.compiled_cache import cache_is_warm, compile_once

    def tiny_run():
        ones = np.ones((1, 2))
        simulate_steps(Requests(ones * 0.5, np.full((1, 2), 3, np.int64),
                                np.full((1, 2), 4, np.int64)),
                       1, "continuous_refill", "ragged", 2, np.random.default_rng(0))

    lock = os.path.join(getattr(step_engine.run_steps._cache, "_cache_path", "."), "compile.lock")
    compiled = compile_once(lambda: cache_is_warm(step_engine.run_steps), tiny_run, lock, say,
                            "the study's step loop", STEP_LOOP_COMPILE_S)
    if load and not compiled:
        tiny_run()
    return compiled


def price_steps(record: StepRecord, requests: Requests, cost, gamma: int) -> RunStats:
    """Step times from the cost model (gamma 0: greedy decode passes), then per-replication totals.

    verify_t = target pass of gamma + 1 positions, draft_t = gamma draft passes; the clock is their
    cumulative sum. A step's rejected draft time is draft_t x (1 - kept drafts / proposed drafts),
    kept drafts = committed tokens - active sequences (each sequence's last token is the target's).
    A cost model with `fixed_pass_times` (the same times for every step) is priced from the
    per-replication totals alone: every request is active for its n consecutive steps, so its
    latency is n step times.
    """
    steps, slot_steps = record.rep_steps.astype(float), record.rep_slot_steps.astype(float)
    fixed = getattr(cost, "fixed_pass_times", None)
    if fixed is not None:
        verify_step, draft_step = fixed(gamma)
        verify, draft = steps * verify_step, steps * draft_step
        rejected = draft_step * (steps - record.rep_kept_share / max(gamma, 1))
        makespan, latency = verify + draft, slot_steps * (verify_step + draft_step)
    else:
        n, ctx = record.seqs, record.context
        capped = (record.draft_mid_context, record.draft_start_context)
        per_step = [np.asarray(cost.target_pass_time_totals(n, ctx, gamma + 1, *capped),
                               dtype=float)]
        if gamma:
            draft_t = np.asarray(cost.draft_passes_time_totals(n, ctx, gamma, *capped),
                                 dtype=float)
            per_step += [draft_t, draft_t * (1.0 - (record.tokens - n) / (gamma * n))]
        step_time = per_step[0] + per_step[1] if gamma else per_step[0]
        sums = np.add.reduceat(np.vstack(per_step), record.rep_first_step, axis=1)
        verify = sums[0]
        draft, rejected = (sums[1], sums[2]) if gamma else (np.zeros_like(verify),) * 2
        makespan = verify + draft
        clock = np.cumsum(step_time)
        admitted_at = clock[record.first_step] - step_time[record.first_step]
        latency = (clock[record.last_step] - admitted_at).sum(axis=1)
    return RunStats(
        makespan=makespan,
        steps=steps,
        active_slot_steps=slot_steps,
        committed_tokens=requests.output_len_tokens.sum(axis=1).astype(float),
        accepted_drafts=record.accepted_drafts.astype(float),
        proposed_drafts=gamma * slot_steps,
        draft_time=draft,
        verify_time=verify,
        rejected_draft_time=rejected,
        latency_sum=latency,
        requests=requests.shape[1],
    )


def serve(requests: Requests, batch_size: int, serving_mode: str, cost, decoder: str = "greedy",
          gamma: int = 0, rng: np.random.Generator | None = None) -> RunStats:
    """Run every replication's queue to completion under `serving_mode` with `decoder` (greedy,
    ragged or lockstep speculative decoding with gamma drafts, drawing from rng)."""
    record = simulate_steps(requests, batch_size, serving_mode, decoder, gamma, rng,
                            store_steps=getattr(cost, "fixed_pass_times", None) is None,
                            draft_budget_tokens=getattr(cost, "draft_kv_budget_tokens", None))
    return price_steps(record, requests, cost, 0 if decoder == "greedy" else gamma)


def split_rows(stats: RunStats, parts: int) -> list[RunStats]:
    """Split a run of stacked replications into `parts` equal consecutive groups."""
    arrays = {k: np.split(getattr(stats, k), parts) for k in RunStats.__dataclass_fields__
              if k != "requests"}
    return [RunStats(requests=stats.requests, **{k: v[i] for k, v in arrays.items()})
            for i in range(parts)]


def concat_stats(parts: list[RunStats]) -> RunStats:
    """Join replication blocks of the same grid point."""
    if len(parts) == 1:
        return parts[0]
    arrays = {k: np.concatenate([getattr(p, k) for p in parts])
              for k in RunStats.__dataclass_fields__ if k != "requests"}
    return RunStats(requests=parts[0].requests, **arrays)
