"""The numpy engine's stretch path: a row with no prefill and nothing to admit advances through a
whole stretch of decode steps at once, each step computed exactly as a single step would be
(src/online/engine_numpy.py; the module docstring of src/online/engine.py says when)."""

from __future__ import annotations

import numpy as np

from src.acceptance import expected_tokens_per_step
from src.online.counter_rng import accepted_drafts


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



def advance_stretch(eng, rows, gamma, next_arrival_ms, free_slot) -> None:
    """Advance steady rows through a stretch of decode-only steps (module docstring)."""
    s, lim = eng.s, eng.limits
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
    per_step = _expected_tokens_per_step(alpha, gamma, eng.rq.hazard_profile)
    to_finish = np.where(act, rem0 / per_step, np.inf).min(axis=1)
    to_arrival = np.where(free_slot, (next_arrival_ms - eng.clock[rows])
                          / np.maximum(eng.last_step_ms[rows], 1e-3), np.inf)
    predicted = np.minimum(to_finish, to_arrival)
    K = int(min(max(1.25 * percentile_75(predicted) + 2, 1),
                min(eng.max_segment_steps, max(eng.segment_work // (m * w), 1))))
    cap_steps = np.full(m, K)
    row_group = eng.row_group[rows]
    for i, g_ in enumerate(eng.groups):
        limit = getattr(g_.policy, "max_segment_steps", None)
        if limit is not None:
            cap_steps = np.where(row_group == i, np.minimum(cap_steps, limit), cap_steps)
    K = int(cap_steps.max())
    j = np.arange(K)
    gcol = gamma[:, None, None]
    k = accepted_drafts(key[:, :, None], steps0[:, :, None] + j, alpha[:, :, None], gcol,
                        eng.rq.hazard_profile)
    tokens = np.cumsum(k + 1, axis=2)  # [m, w, K] committed after step j (uncapped)
    fin = (tokens >= rem0[:, :, None]) & act[:, :, None]
    any_fin = fin.any(axis=1)  # [m, K]
    first_fin = np.where(any_fin.any(axis=1), any_fin.argmax(axis=1), K)
    ctx_before = ctx0[:, :, None] + tokens - (k + 1)  # [m, w, K]
    demand = (_ceil_div(ctx_before + gcol + 1, bs) * act[:, :, None]).sum(axis=1)  # [m, K]
    kv_bad = demand > eng.cap[rows][:, None]
    kv_limit = np.where(kv_bad.any(axis=1), kv_bad.argmax(axis=1), K)
    # step times of the stretch: [m * K] rows of [w] slots; steps from a row's kv_limit on
    # are cut below, and are priced at step 0's contexts: theirs need more KV cache than the
    # GPU holds, which the cost model's memory check refuses
    priced_ctx = np.where((j[None, :] < kv_limit[:, None])[:, None, :], ctx_before,
                          ctx_before[:, :, :1])

    def masks():
        return (np.broadcast_to(act[:, None, :], (m, K, w)).reshape(m * K, w),
                priced_ctx.transpose(0, 2, 1).reshape(m * K, w))

    target_ms, draft_ms = eng._step_ms(
        np.repeat(rows, K), np.repeat(n, K),
        (priced_ctx * act[:, :, None]).sum(axis=1).reshape(m * K), np.repeat(gamma, K), w,
        masks)
    times = (target_ms + draft_ms).reshape(m, K)
    ends = eng.clock[rows][:, None] + np.cumsum(times, axis=1)
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
    eng.pool_acc[rows] += acc_rows
    eng.pool_tested[rows] += tested_add.sum(axis=1)
    eng.stat["acc"][rows] += acc_rows
    eng.stat["prop"][rows] += gamma * n * n_steps
    # inter-token gaps: the first step's per sequence, then one per sequence per step
    end0 = ends[:, 0]
    last_emit = take(s.last_emit)
    first_gap = end0[:, None] - last_emit
    eng._itl_add(put_r, first_gap[act])
    if (n_steps > 1).any():
        w_steps = np.where(in_seg & (j[None, :] > 0), n[:, None], 0).astype(float)
        eng._itl_add(rows[:, None], times, w_steps)  # rows broadcast against [m, K]
    end_last = ends[mi, last]
    eng.last_step_ms[rows] = times[mi, last]
    s.last_emit[put_r, put_c] = np.repeat(end_last, n)  # n running slots per row, in order
    seg_ms = np.where(in_seg, times, 0.0).sum(axis=1)
    eng.stat["steps"][rows] += n_steps
    eng.stat["busy"][rows] += seg_ms
    eng.stat["run_int"][rows] += seg_ms * n
    eng.stat["slot"][rows] += n * n_steps
    cap = eng.cap[rows]
    ctx_after = ctx0[:, :, None] + np.minimum(tokens, rem0[:, :, None])
    used = (_ceil_div(ctx_after, bs) * act[:, :, None]).sum(axis=1)  # blocks after each step
    eng.stat["kv_int"][rows] += (
        np.where(in_seg, times * np.minimum(used, cap[:, None]), 0.0).sum(axis=1) / cap
    )
    np.add.at(eng.gamma_steps, (rows, gamma), n_steps)
    eng.clock[rows] = end_last
    # finished requests leave
    fr, fc = np.nonzero(act & (done_tokens >= rem0))
    if fr.size:
        r = rows[fr]
        c = order[fr, fc]
        q = s.req[r, c]
        eng.finish[r, q] = end_last[fr] * 1e-3
        eng.generated[r, q] = eng.rq.output_tokens[r, q]
        eng._leave(r, c)
        eng.release(r, end_last[fr])
