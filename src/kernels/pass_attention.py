"""A target pass's decode attention priced from the measured generation-attention table,
vectorised over passes: what `step-time` (pricing.py), the cost model (HardwareCostModel's
`attention_kernels`, src/kernels/costmodel.py with_kernels) and the compiled serving engine
(src/online/step_prices.py `measured_attention_ms`, fed by `rows`) all price from.

The table (src/kernels/tables.py: one KV dtype, the engine's main kernel source, full attention)
times one layer's kernel for `batch` sequences that each score ONE new position against kv_len
keys. For a pass of S sequences x t positions over C cached tokens in all (design.md,
"Measured kernels"; every sequence at the mean context, as the fitted kernels take it):

- kv = C / S + t (the last position's keys). rows(S)[j]: L x the table interpolated linearly in
  batch at S on each KV grid line kv_j (grid.py's rule, along_axis: exact at a measured batch;
  NaN where a bracketing row is missing or rejected); above the table's largest batch B, the
  row at B plus the roofline's increment from B to S at that kv_j.
- one(S, kv): linear in kv between the grid lines of S's row, inside the contiguous run of rows
  [lo, hi] that S's row has (the table is not a full grid: long KV at large batch is absent);
  outside it, the measured row at the nearest edge kv_e plus the roofline's increment from kv_e,
  one(S, kv_e) + roof1(S, kv) - roof1(S, kv_e) (roof1: roofline.attention_s of one position per
  sequence at kv keys): the two meet at the edge, the time keeps the roofline's slope in KV
  bytes, and the measured per-sequence fixed part is kept (additive, not scaled: the FA3 rows
  have ~0.2 us per sequence that does not grow with kv).
- a verification of t > 1 positions: one(S, kv) x roofline.attention_s(S, t, C) /
  roof1(S, kv): the engine runs ONE varlen kernel with t queries per sequence that reads each
  sequence's KV once (vLLM v1 vllm/v1/attention/backends/flash_attn.py FlashAttentionImpl.forward:
  flash_attn_varlen_func with cu_seqlens_q = query_start_loc, max_seqlen_q = max_query_len; not
  t x S one-query rows), so the measured one-query kernel carries the roofline's premium of t
  queries over one at the same KV length (1 at t = 1), for t <= MAX_DECODE_POSITIONS.

What is replaced: the roofline's attention of the pass plus one kernel's fixed time per layer
(the measured row includes its launch), as pricing.py did.
"""
from __future__ import annotations

import numpy as np

from src.costmodel.roofline import attention_s, kernel_fixed_s
from src.kernels.grid import along_axis
from src.kernels.measured import MeasuredKernels
from src.kernels.tables import KV_DTYPE_OF_FORMAT

MAX_DECODE_POSITIONS = 16  # widest pass whose attention is priced from the decode-attention table


def covered_why(model, tp: int) -> str:
    """'' where the table can price this network's attention at tp, else why not (one line)."""
    if not (model.attention == "gqa" and not model.sliding_window_layers
            and KV_DTYPE_OF_FORMAT.get(model.kv_cache_format)
            and model.n_heads % tp == 0 and model.n_kv_heads % tp == 0):
        return (f"{model.model_id}: attention from the roofline (measured decode attention "
                "prices full GQA attention with a BF16/FP8 cache so far)")
    return ""


class PassAttention:
    """Measured decode attention of one network (PassCoefficients c at tp) on one table source.
    Picklable (numpy arrays, the MeasuredKernels' source and peaks, c)."""

    def __init__(self, kernels: MeasuredKernels, c, model, tp: int, gpu, params):
        self.kernels, self.c = kernels, c
        self.n_layers = model.n_layers
        self.max_positions = MAX_DECODE_POSITIONS
        self.fixed_ms = model.n_layers * kernel_fixed_s(gpu, params) * 1e3  # one kernel a layer
        self.why = covered_why(model, tp)
        self.heads = (model.n_heads // tp, model.n_kv_heads // tp, model.head_dim)
        g = None
        if not self.why:
            kv_dtype = KV_DTYPE_OF_FORMAT[model.kv_cache_format]
            g = kernels.decode_attention(*self.heads, kv_dtype)
            if g is None:
                self.why = (f"{model.model_id}: no decode-attention rows of heads="
                            f"{self.heads[0]}/{self.heads[1]} d={self.heads[2]} {kv_dtype}")
        self.applies = g is not None
        if g is not None:
            self.batch_axis, self.kv_axis = g[0].astype(float), g[1].astype(float)
            self.grid_ms, self.kernel_source = g[2], g[3]
        self._rows = (np.zeros((1, 0)), np.full(1, -1), np.full(1, -1))
        self._bounds = (np.zeros(0), np.zeros(0))  # _edge_ms's per-S run bounds, kv tokens
        if g is not None:  # per interval (axis[i1 - 1], axis[i1]]: its left end and width
            self._kv_left = self.kv_axis[np.maximum(np.arange(self.kv_axis.size) - 1, 0)]
            self._kv_span = self.kv_axis - self._kv_left

    @property
    def label(self) -> str:
        src = self.kernels.src
        return f"{src.backend}-{src.version}"

    def _roof1_ms(self, S, kv):
        """roofline.attention_s of one position per sequence at kv keys, all layers, ms."""
        return np.asarray(attention_s(self.c, S, 1.0, S * (kv - 1.0))) * 1e3

    def rows(self, max_seqs: int):
        """(rows [S + 1, J] all layers' ms on the KV grid, NaN where absent; lo, hi [S + 1]: the
        contiguous run of finite rows each S prices inside, -1 where it has none), S = 0..max_seqs
        (grown when asked for more; an entry does not depend on the size)."""
        rows, lo, hi = self._rows
        if rows.shape[0] > max_seqs or not self.applies:
            return rows, lo, hi
        S = np.arange(max_seqs + 1, dtype=float)
        B = self.batch_axis[-1]
        rows = np.full((S.size, self.kv_axis.size), np.nan)
        for j, kv in enumerate(self.kv_axis):
            col = along_axis(self.batch_axis, self.grid_ms[:, j], S) * self.n_layers
            above = S > B
            if above.any():  # past the largest batch: its row plus the roofline's increment
                edge = self.grid_ms[-1, j] * self.n_layers
                col[above] = edge + (self._roof1_ms(S[above], kv) - self._roof1_ms(B, kv))
            rows[:, j] = col
        rows[0] = np.nan  # no sequence, no pass
        finite = np.isfinite(rows)
        lo = np.where(finite.any(axis=1), finite.argmax(axis=1), -1)
        hi = lo.copy()
        for s in np.flatnonzero(lo >= 0):
            run = finite[s, lo[s]:]
            hi[s] = lo[s] + (run.size if run.all() else int(run.argmin())) - 1
        self._rows = (rows, lo, hi)
        return self._rows

    def _edge_ms(self, S, kv):
        """(all layers' ms of the one-position kernel of S's row at kv clipped to the row's
        finite run, NaN where S has no row; kv so clipped: the edge, kv itself inside the run).
        One gather per per-S or per-interval quantity (flat takes, no 2-D fancy indexing): the
        same floating-point operations on the same operands as the rule in the module docstring,
        so the same bytes."""
        rows, lo, hi = self.rows(int(S.max(initial=0)))
        if self._bounds[0].size != lo.size:  # per S: the run's KV bounds (axis[0] without a run)
            axis = self.kv_axis
            self._bounds = (axis[np.maximum(lo, 0)], axis[np.maximum(hi, 0)])
        axis = self.kv_axis
        kc = np.minimum(np.maximum(kv, self._bounds[0].take(S)), self._bounds[1].take(S))
        # kc lies in [axis[lo], axis[hi]], so i1 <= hi; i1 = 0 only where kc = axis[0] (exact)
        i1 = np.searchsorted(axis, kc, side="left")
        exact = axis.take(i1) == kc
        flat1 = S * axis.size + i1  # rows[S, i1] in rows' flat order
        with np.errstate(invalid="ignore", divide="ignore"):
            # where exact the interval's weight is not used (a NaN from a 0 span included)
            w = (kc - self._kv_left.take(i1)) / self._kv_span.take(i1)
            r1 = rows.ravel().take(flat1)
            inner = (1.0 - w) * rows.ravel().take(np.maximum(flat1 - 1, 0)) + w * r1
        # a row without a finite run is NaN throughout: r1 and inner are NaN there already
        return np.where(exact, r1, inner), kc

    def pass_ms(self, n_seqs, sum_ctx, t, roof_t_ms=None):
        """(all layers' attention ms of passes of n_seqs sequences x t positions over sum_ctx
        cached tokens, NaN where not priced from the table; the KV edge used (kv itself inside
        the table); the part of the ms from measured rows: the edge's row x the premium) [N].
        roof_t_ms: the roofline's attention of these passes, ms, where the caller has it (the
        cost model's _attention_pnorm_ms: attention_s to rounding); else attention_s."""
        S = np.atleast_1d(np.asarray(n_seqs)).astype(np.int64)
        C = np.asarray(sum_ctx, dtype=float)
        t = np.asarray(t, dtype=float)
        S, C, t = (x.ravel() for x in np.broadcast_arrays(S, C, t))
        if roof_t_ms is not None:
            roof_t_ms = np.broadcast_to(np.asarray(roof_t_ms, float), np.shape(S)).ravel()
        use = (S > 0) & (t <= MAX_DECODE_POSITIONS)
        nan = np.full(S.size, np.nan)
        if not self.applies or not use.any():
            return nan, nan.copy(), nan.copy()
        Sm = np.maximum(S.astype(float), 1.0)
        kv = C / Sm + t
        edge, kc = self._edge_ms(S if use.all() else np.where(use, S, 0), kv)
        use &= np.isfinite(edge)
        off = use & (kc != kv)
        multi = use & (t != 1.0)
        if not (off.any() or multi.any()):  # one position inside the run: the row itself
            ms = np.where(use, edge, np.nan)
            return ms, np.where(use, kc, np.nan), ms.copy()
        # one position at the pass's last KV length (the premium's base, the increment's top):
        # only where it is used (attention_s of fitted kernels is the costly part); each part on
        # the whole arrays where every entry needs it (a pass of one shape: the usual call)
        need = _where(off | multi)
        Sn = _pick(Sm, need)
        r_1 = np.asarray(attention_s(self.c, Sn, 1.0, _pick(C, need) + Sn * (
            _pick(t, need) - 1.0)), float) * 1e3
        if need is not None:
            r_1 = _put(nan, need, r_1)
        val = edge
        if off.any():  # beyond the run: the edge's row + the roofline's increment
            at = _where(off)
            inc = _pick(edge, at) + (_pick(r_1, at) - self._roof1_ms(_pick(Sm, at),
                                                                      _pick(kc, at)))
            val = inc if at is None else _put(edge, at, inc)
        ms, from_rows = val, edge
        if multi.any():
            at = _where(multi)
            r_t = (np.asarray(attention_s(self.c, _pick(Sm, at), _pick(t, at), _pick(C, at)),
                              float) * 1e3 if roof_t_ms is None else _pick(roof_t_ms, at))
            premium = r_t / _pick(r_1, at)
            if at is not None:
                premium = _put(np.ones(S.size), at, premium)
            ms, from_rows = val * premium, edge * premium
        return (np.where(use, ms, np.nan), np.where(use, kc, np.nan),
                np.where(use, from_rows, np.nan))

    def replace_ms(self, attention_ms, n_seqs, sum_ctx, t):
        """The cost model's attention term (HardwareCostModel._attention_pnorm_ms: without the
        attention kernels' fixed time) with the measured kernel in its place where the table
        prices the pass: measured - one kernel's fixed time per layer (the rest of the fixed time
        stays in the cost model's table, as pricing.py keeps it)."""
        shape = np.shape(attention_ms)
        ms = self.pass_ms(n_seqs, sum_ctx, t, attention_ms)[0]
        ms = ms.reshape(shape) if shape else ms[0]
        return np.where(np.isfinite(ms), ms - self.fixed_ms, attention_ms)


def _where(mask):
    """The indices where mask holds, or None where it holds everywhere (no gather needed)."""
    return None if mask.all() else np.flatnonzero(mask)


def _pick(x, at):
    """x at the indices `at` (_where's), the whole of x for None."""
    return x if at is None else x[at]


def _put(x, at, values):
    """A copy of x with values at the indices `at`."""
    x = x.copy()
    x[at] = values
    return x
