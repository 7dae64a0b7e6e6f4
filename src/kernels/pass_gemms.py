"""A pass's GEMMs priced from measured kernels, vectorised over the pass's row count T = S t.

One function of T serves both `step-time` (pricing.py, one T) and the cost model's
attention-free table (HardwareCostModel._table_ms, every T of the table at once), so the two
give the same figure for the same pass. For each GEMM g of a dense BF16 decoder
(roofline.plain_gemm_shapes: QKV, O, gate/up, down per layer, the LM head once) the measured
time of one kernel at (m = T, n_g, k_g) replaces the roofline's pnorm_g / count_g + one kernel's
fixed time (design.md, "Measured kernels"):

- n_g, k_g inside the table's grid: bilinear in (n, k) on every m grid line, then linear in m
  (grid.py's multilinear rule, taken axis by axis: the same value up to rounding);
- T above the largest measured m (m_max): the roofline, anchored to the table's edge:
  max(roofline_g(T) x measured(m_max) / roofline_g(m_max), measured(m_max)), so the two meet at
  m_max and more rows never cost less than the edge's row (the roofline's tile and wave
  rounding can dip just past 32,768 rows); no step: tests/test_kernels_costmodel.py prices
  m_max - 1, m_max, m_max + 1;
- n_g or k_g off the grid (Llama-3.1-8B's LM head, n = 128,256 > 65,536), a missing or rejected
  corner row, T < 1: the roofline's price (delta 0).
"""
from __future__ import annotations

import numpy as np

from src.costmodel.roofline import (
    PassCoefficients,
    _pnorm,
    gemm_terms_s,
    kernel_fixed_s,
    plain_gemm_shapes,
)
from src.kernels.grid import _bracket, along_axis
from src.kernels.measured import MeasuredKernels
from src.kernels.tables import GEMM_DTYPE_OF_FORMAT


def _column(grid, n: float, k: float) -> np.ndarray | None:
    """The table interpolated at (n, k) on each of its m grid lines (NaN where a weighted corner
    is missing or rejected); None where n or k is off the grid."""
    bn, bk = _bracket(grid.n, n), _bracket(grid.k, k)
    if bn is None or bk is None:
        return None
    col = np.zeros(grid.m.size)
    for jn, wn in ((bn[0], 1.0 - bn[2]), (bn[1], bn[2])):
        for jk, wk in ((bk[0], 1.0 - bk[2]), (bk[1], bk[2])):
            if wn * wk != 0.0:
                col = col + (wn * wk) * grid.latency_ms[:, jn, jk]
    return col


class PassGemms:
    """Measured GEMMs of one network (PassCoefficients c at tp, ep) on one table source;
    `delta_ms(T)` what they change in a pass of T rows. A dense BF16 decoder (tp <= its KV
    heads): roofline.plain_gemm_shapes, all BF16. A MoE decoder (MLA, FP8 and sliding windows
    included): shapes.layer_gemms + head_gemms, the order PassCoefficients has them in, each GEMM
    at its own format's table (bf16, fp8, fp8_block: GEMM_DTYPE_OF_FORMAT; MXFP4 / NVFP4 dense
    GEMMs keep the roofline) and the routed-expert GEMMs left to `moe` (pass_moe.py PassMoe,
    which prices them per pass of S x t: pass_delta_ms; where the engine runs the shared experts
    on a second stream, shared_overlap, pass_delta_ms also takes off shared_hidden_ms). Other
    dense decoders (FP8/NVFP4 weights, MLA, sliding windows) keep the roofline's GEMMs: applies
    False. Picklable (numpy arrays and the MeasuredKernels' source and peaks)."""

    def __init__(self, kernels: MeasuredKernels, c: PassCoefficients, model, tp: int, gpu,
                 params, ep: int = 1, moe=None, shared_overlap: bool = False):
        self.kernels = kernels
        self.c = c
        self.moe = moe if moe is not None and moe.applies else None
        self._routed = moe  # the routed experts' PassMoe, measured or not (shared_hidden_ms)
        self.kfix_s = kernel_fixed_s(gpu, params)
        if model.is_plain and tp <= model.n_kv_heads:
            layer, head = plain_gemm_shapes(model, tp)
            gemms = ([(k, n, model.n_layers, "bfloat16", True) for k, n in layer]
                     + [(k, n, 1, "bfloat16", False) for k, n in head])
            index = list(range(len(gemms)))
        elif not model.n_routed_experts:  # dense FP8/NVFP4, MLA or windowed: the roofline (yet)
            gemms, index = [], []
        else:
            import src.costmodel.shapes as shapes

            every = shapes.layer_gemms(model, tp, None, ep) + shapes.head_gemms(model, tp)
            index = [i for i, g in enumerate(every) if g.role != "expert"]
            gemms = [(every[i].k, every[i].n, every[i].count,
                      GEMM_DTYPE_OF_FORMAT.get(every[i].fmt, ""), every[i].role != "head")
                     for i in index]
        self.index = np.array(index, dtype=int)
        roles = [every[i].role for i in index] if index and model.n_routed_experts else []
        self.shared = np.array([r == "shared" for r in roles], dtype=bool)
        # the engine runs the shared experts beside the routed ones (EngineProfile
        # shared_experts_overlap): the pass hides min(shared, routed) (shared_hidden_ms)
        self.shared_overlap = bool(shared_overlap and self.shared.any() and moe is not None
                                   and moe.moe_layers)
        self.n_layer = sum(g[4] for g in gemms)
        self.shapes = [(k, n) for k, n, _, _, _ in gemms]  # (k, n) each
        self.dtypes = [d for _, _, _, d, _ in gemms]
        self.counts = np.array([cnt for _, _, cnt, _, _ in gemms], float)
        self.m_axes, self.columns = [], []
        for (k, n), dtype in zip(self.shapes, self.dtypes):
            grid = kernels.gemm_grid(dtype)[0] if dtype else None
            self.m_axes.append(grid.m.astype(float) if grid is not None else np.zeros(0))
            self.columns.append(_column(grid, n, k) if grid is not None else None)
        self.m_axis = next((a for a in self.m_axes if a.size), np.zeros(0))  # the first GEMM's
        self.applies = any(col is not None for col in self.columns) or self.moe is not None
        self._memo: dict[float, tuple] = {}

    @property
    def label(self) -> str:
        src = self.kernels.src
        return f"{src.backend}-{src.version}"

    def _roofline_ms(self, T: np.ndarray) -> np.ndarray:
        """[G, len(T)] each GEMM's roofline ms in the pass (count kernels: pnorm + count kfix)."""
        G = len(self.c.gemm_weight_s)
        mem, comp = gemm_terms_s(self.c, np.broadcast_to(T, (G, T.size)))
        roof = _pnorm(mem, comp, self.c.sharpness_p)[self.index]
        return (roof + self.counts[:, None] * self.kfix_s) * 1e3

    def parts_ms(self, T) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(layers delta [N], LM head delta [N], measured ms [N], measured? [G, N]) of passes of
        T rows (any shape, flattened to N): measured - roofline of the GEMMs the table prices."""
        T = np.asarray(T, dtype=float).ravel()
        N = T.size
        if not self.applies or not self.shapes:
            z = np.zeros(N)
            return z, z.copy(), z.copy(), np.zeros((len(self.shapes), N), bool)
        roof, measured = self._priced_ms(T)
        ok = np.isfinite(measured)
        delta = np.where(ok, measured - roof, 0.0)
        return (delta[: self.n_layer].sum(axis=0), delta[self.n_layer:].sum(axis=0),
                np.where(ok, measured, 0.0).sum(axis=0), ok)

    def _priced_ms(self, T: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """([G, N] roofline ms, [G, N] measured ms, NaN where the table does not price it) of
        every GEMM of passes of T rows (flat)."""
        N = T.size
        roof = self._roofline_ms(T)
        measured = np.full((len(self.shapes), N), np.nan)
        edges: dict[float, np.ndarray] = {}  # every GEMM's roofline at one table edge m_max
        for g, (col, m_axis) in enumerate(zip(self.columns, self.m_axes)):
            if col is None:
                continue
            one = along_axis(m_axis, col, T)
            above = T > m_axis[-1]
            if above.any():  # the roofline anchored to the table's edge
                m_max = float(m_axis[-1])
                if m_max not in edges:
                    edges[m_max] = self._roofline_ms(np.array([m_max]))
                roof_edge = edges[m_max][g, 0]
                ratio = col[-1] / (roof_edge / self.counts[g])
                anchored = np.maximum(ratio * roof[g] / self.counts[g], col[-1])
                one = np.where(above, anchored, one)
            measured[g] = self.counts[g] * one
        return roof, measured

    def shared_hidden_ms(self, S, t) -> np.ndarray:
        """ms of the shared experts hidden behind the routed experts in passes of S x t (flat
        arrays; zeros where the engine does not overlap them), over the MoE layers. Each side at
        its price in the pass (the table's where it prices the GEMM or the layer, else the
        roofline's); the two streams share one GPU's HBM and SMs, so the overlapped layers take
        max(routed, shared, roofline(routed) + roofline(shared)): the second stream hides the
        shared experts only where the routed kernel leaves the GPU idle (a DeepGEMM layer at
        three times its roofline), not where it already runs at the roofline's rate."""
        S, t = (np.asarray(a, float).ravel() for a in np.broadcast_arrays(S, t))
        if not self.shared_overlap:
            return np.zeros(S.size)
        roof, measured = self._priced_ms(S * t)
        sel = self.shared
        shared = np.where(np.isfinite(measured[sel]), measured[sel], roof[sel]).sum(axis=0)
        routed_roof = self._routed.roofline_ms(S, t)
        routed = routed_roof
        if self.moe is not None:
            _, meas, ok = self.moe.parts_ms(S, t)
            routed = np.where(ok, meas, routed)
        together = np.maximum(np.maximum(routed, shared), routed_roof + roof[sel].sum(axis=0))
        return np.clip(routed + shared - together, 0.0, np.minimum(routed, shared))

    def delta_ms(self, T) -> np.ndarray:
        """ms the measured GEMMs add to the roofline pass of T rows (T's shape), memoised per
        distinct T: what HardwareCostModel adds to its attention-free table."""
        T = np.asarray(T, dtype=float)
        uniq, inverse = np.unique(T, return_inverse=True)
        todo = [u for u in uniq.tolist() if u not in self._memo]
        if todo:
            layers, head, _, _ = self.parts_ms(np.array(todo))
            self._memo.update(zip(todo, (layers + head).tolist()))
        out = np.array([self._memo[u] for u in uniq.tolist()])
        return out[inverse].reshape(T.shape)

    def pass_delta_ms(self, S, t) -> np.ndarray:
        """ms the measured GEMMs and (where `moe` is set) the measured routed experts add to the
        roofline passes of S sequences x t positions (arrays of one shape): what
        HardwareCostModel._table_ms adds to its attention-free table, and so what the compiled
        serving engine prices from."""
        S, t = np.broadcast_arrays(np.asarray(S, float), np.asarray(t, float))
        out = self.delta_ms(S * t)
        if self.moe is not None:
            out = out + self.moe.parts_ms(S, t)[0].reshape(S.shape)
        if self.shared_overlap:
            out = out - self.shared_hidden_ms(S, t).reshape(S.shape)
        return out

    def __getstate__(self):
        return {**self.__dict__, "_memo": {}}
