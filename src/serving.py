"""The engine loop shared by greedy and speculative decoding: slots, queue, serving mode, clock.

R independent replications run side by side as rows of [R, B] slot arrays (B = batch size). Each
replication serves its own queue of N requests, all present at time 0 (an offline batch workload):

* static_batch: requests are taken B at a time; a batch starts together and the next batch is
  admitted only once every slot is empty, so finished slots idle until the batch's last request ends.
* continuous_refill: a slot freed at a step takes the next queued request before the next step
  (Orca-style iteration-level scheduling, Yu et al. 2022).

Per step the decoder (greedy or speculative) says how many tokens each active slot commits and how
long the step took; the loop advances the clock, retires finished requests and refills slots. The
loop never computes a time itself: that is the decoder's cost model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from src.workload import Requests


@dataclass(frozen=True)
class StepOutcome:
    """What one decoding step did, per slot [R, B] or per replication [R]."""

    committed_tokens: np.ndarray  # [R, B] tokens appended to each slot's sequence (0 if inactive)
    accepted_drafts: np.ndarray  # [R] draft tokens the verifier accepted
    proposed_drafts: np.ndarray  # [R] draft tokens proposed
    draft_time: np.ndarray  # [R] time in draft passes
    verify_time: np.ndarray  # [R] time in the target pass (verification, or the greedy decode)
    rejected_draft_time: np.ndarray  # [R] share of draft_time spent on drafts not committed


# decoder(rows [R'] int, active [R',B] bool, n_active [R'] int, alpha [R',B], remaining_tokens [R',B],
#         context_len_tokens [R',B]) -> outcome. The loop drops finished replications from its
# arrays, so row i of every array is replication rows[i]; a decoder with per-replication state
# (random streams, gammas) looks it up through rows.
Decoder = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], StepOutcome]


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


_SUMMED = ("steps", "active_slot_steps", "accepted_drafts", "proposed_drafts", "draft_time", "verify_time",
           "rejected_draft_time")


def serve(requests: Requests, batch_size: int, serving_mode: str, decoder: Decoder) -> RunStats:
    """Run every replication's queue to completion under `serving_mode`."""
    R, N = requests.shape
    B = batch_size
    rows = np.arange(R)  # replication of each row of the working arrays
    # [R, B] state in Fortran (slot-major) order: the per-replication reductions over slots that
    # every step needs are then contiguous, which is 3-10x faster for small B than C order
    slot_request = np.zeros((R, B), dtype=np.int64, order="F")  # index into the replication's requests
    remaining = np.zeros((R, B), dtype=np.int64, order="F")  # tokens still to generate; 0 = empty slot
    context = np.zeros((R, B), dtype=np.int64, order="F")
    alpha = np.full((R, B), 0.5, order="F")  # any valid value; inactive slots are ignored
    next_request = np.zeros(R, dtype=np.int64)  # head of each replication's queue
    clock = np.zeros(R)
    makespan = np.zeros(R)
    admitted_at = np.zeros((R, N))
    finished_at = np.zeros((R, N))
    totals = {k: np.zeros(R) for k in _SUMMED}
    epoch: list[tuple] = []  # (n_active, StepOutcome) per step since the arrays were last compacted

    def flush():  # add the epoch's per-step figures to the totals of its rows
        if epoch:
            n_active = np.array([e[0] for e in epoch])
            totals["steps"][rows] += (n_active > 0).sum(axis=0)
            totals["active_slot_steps"][rows] += n_active.sum(axis=0)
            for key in _SUMMED[2:]:
                totals[key][rows] += np.sum([getattr(e[1], key) for e in epoch], axis=0)
            epoch.clear()

    # slots to fill before the next step, as (row, slot, rank of the slot among its row's new
    # admissions); at the start every slot of every row
    fill_r, fill_s = np.repeat(np.arange(R), B), np.tile(np.arange(B), R)
    fill_rank = fill_s
    while True:
        if fill_r.size:
            req = next_request[fill_r] + fill_rank
            ok = req < N
            r_idx, s_idx, req = fill_r[ok], fill_s[ok], req[ok]
            rep = rows[r_idx]
            slot_request[r_idx, s_idx] = req
            remaining[r_idx, s_idx] = requests.output_len_tokens[rep, req]
            context[r_idx, s_idx] = requests.prompt_len_tokens[rep, req]
            alpha[r_idx, s_idx] = requests.alpha[rep, req]
            admitted_at[rep, req] = clock[r_idx]
            next_request += np.bincount(r_idx, minlength=rows.size)
        active = remaining > 0
        n_active = active.sum(axis=1)
        live = n_active > 0
        n_live = np.count_nonzero(live)
        if n_live == 0:
            break
        if 2 * n_live <= rows.size:  # half the rows are done: drop them (every array keeps row order)
            flush()
            makespan[rows[~live]] = clock[~live]
            rows, next_request, clock, n_active = (x[live] for x in (rows, next_request, clock, n_active))
            slot_request, remaining, context, alpha, active = (
                x.T[:, live].T for x in (slot_request, remaining, context, alpha, active))  # stay F-ordered
        out = decoder(rows, active, n_active, alpha, remaining, context)
        clock += out.draft_time + out.verify_time  # zero for replications with no active slot
        remaining -= out.committed_tokens
        context += out.committed_tokens
        epoch.append((n_active, out))
        r_idx, s_idx = np.nonzero(active & (remaining == 0))  # requests that just finished
        finished_at[rows[r_idx], slot_request[r_idx, s_idx]] = clock[r_idx]
        if serving_mode == "continuous_refill":  # each freed slot takes the next queued request
            fill_r, fill_s = r_idx, s_idx
            fill_rank = np.arange(r_idx.size) - np.searchsorted(r_idx, r_idx)  # nonzero sorts by row
        elif r_idx.size:  # static_batch: a row admits its next batch only once all its slots are empty
            emptied = np.unique(r_idx)
            emptied = emptied[~remaining[emptied].any(axis=1)]
            fill_r, fill_s = np.repeat(emptied, B), np.tile(np.arange(B), emptied.size)
            fill_rank = fill_s
        else:
            fill_r = r_idx  # nothing finished, nothing to admit
    flush()
    makespan[rows] = clock
    return RunStats(
        makespan=makespan,
        committed_tokens=requests.output_len_tokens.sum(axis=1).astype(float),
        latency_sum=(finished_at - admitted_at).sum(axis=1),
        requests=N,
        **totals,
    )


def split_rows(stats: RunStats, parts: int) -> list[RunStats]:
    """Split a run of stacked replications into `parts` equal consecutive groups."""
    arrays = {k: np.split(getattr(stats, k), parts) for k in RunStats.__dataclass_fields__ if k != "requests"}
    return [RunStats(requests=stats.requests, **{k: v[i] for k, v in arrays.items()}) for i in range(parts)]


def concat_stats(parts: list[RunStats]) -> RunStats:
    """Join replication blocks of the same grid point."""
    if len(parts) == 1:
        return parts[0]
    arrays = {k: np.concatenate([getattr(p, k) for p in parts])
              for k in RunStats.__dataclass_fields__ if k != "requests"}
    return RunStats(requests=parts[0].requests, **arrays)
