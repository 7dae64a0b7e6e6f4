"""A MoE target's routed experts priced from the engine's measured fused-MoE table, vectorised
over passes of S sequences x t positions (T = S t tokens).

The table (AIConfigurator's moe_perf.parquet of the engine version on the GPU's system) times
one MoE layer's routed experts on one GPU: the engine's fused kernel (vLLM `fused_experts` and
its modular kernels, SGLang's fused_moe_triton / flashinfer, TensorRT-LLM's MoE torch flow:
token sort, gate/up GEMM, activation, down GEMM, weighted sum) for T tokens entering the layer,
by hidden size h, the experts' FFN width I, experts E, top-k, moe_tp (TP over I) and moe_ep
(EP over the experts), weight dtype and routing distribution. The layer's router GEMM and
top-k softmax are outside it (the collector hands the kernel its top-k ids), so they stay where
they are: the router among the dense GEMMs (pass_gemms.py), the softmax in the roofline.

Rule (design.md, "Measured kernels"):
- the key: exact on (h, I, E, k, moe_tp, moe_ep, dtype, distribution) -- the table holds model
  shapes, not a grid to interpolate across; moe_tp = tp, moe_ep = 1 with TP over the experts'
  FFN (ep 1), moe_tp = 1, moe_ep = ep = tp with expert parallelism, as the engines shard them;
- the routing distribution: ROUTING_DISTRIBUTION (power-law, AIConfigurator's own default);
- along T: linear between measured token counts (grid.py's rule, along_axis: a measured count
  is its own row); above the largest measured count the roofline's expert cost anchored to the
  edge, max(roof(S, t) x measured(T_max) / roof(T_max, 1), measured(T_max)); T below the first
  count, a missing or rejected row (physics.py rule 4 / 2), or no row of the key: the roofline;
- what it replaces, per MoE layer: the roofline's routed-expert GEMMs (variants.py: D touched
  experts x pnorm at T k / D rows, or the slowest GPU's experts under EP) plus the fixed time of
  FUSED_EXPERT_KERNELS kernels. The routed experts' SwiGLU bytes stay in the roofline's
  elementwise term (< 0.1 ms per step for Qwen3-235B-A22B at 64 tokens; design.md says so).
The measured layer is priced by T alone: the table's routing is synthetic, so the roofline's
locality between a sequence's consecutive positions (moe.py) does not reach the measured part.
"""
from __future__ import annotations

import numpy as np

from src.costmodel.roofline import _pnorm, gemm_terms_s, kernel_fixed_s
from src.costmodel.shapes import expert_format, layer_counts
from src.costmodel.variants import expert_rows_and_multiplicity
from src.kernels.grid import along_axis
from src.kernels.measured import MeasuredKernels, moe_column
from src.kernels.tables import MOE_DTYPE_OF_FORMAT

# AIConfigurator's routing for its estimates: workload_distribution "power_law"
# (aiconfigurator_core/sdk/config.py 0.12.0) with alpha 1.2 for its generic MoE family (Qwen3,
# gpt-oss: sdk/models/moe.py `_power_law_alpha = 1.2`) and 1.01 for DeepSeek's MLA family
# (sdk/models/deepseek.py `_power_law_alpha = 1.01`); its collector draws the tokens' experts
# from that law (collector power_law_logits_v3). Real routers are not balanced, and a fused
# layer waits for its most loaded expert: `balanced` would be the lower bound.
POWER_LAW_ALPHA_MLA = "1.01"
POWER_LAW_ALPHA = "1.2"
# kernels of the fused layer whose fixed time the roofline counts elsewhere: the gate/up and down
# GEMMs and the activation (roofline.KERNELS_PER_LAYER_NON_ATTENTION's dense FFN kernels), the
# token sort and the weighted sum (2 of variants.MOE_EXTRA_KERNELS_PER_LAYER)
FUSED_EXPERT_KERNELS = 5


def monotone_in_tokens(latency_ms: np.ndarray) -> np.ndarray:
    """The measured layer times, by increasing token count, lifted to their running maximum: a
    fused-MoE layer given more tokens does at least the work of fewer (every token's k experts
    are still read and multiplied), so a row measured faster than a smaller one (vLLM 0.24.0's
    gpt-oss-120b MXFP4 rows on b200_sxm: 640 and 768 tokens under 512) is noise or a kernel
    switch the engine's own schedule would not pick for the larger batch; priced as the
    smaller row. Rejected rows (NaN) stay NaN."""
    lat = np.array(latency_ms, dtype=float)
    ok = np.isfinite(lat)
    lat[ok] = np.maximum.accumulate(lat[ok]) if ok.any() else lat[ok]
    return lat


def _dtype_lanes(dtype: str, gpu) -> tuple[str, ...]:
    """The MoE table's dtypes to try, in order: MXFP4 experts on a GPU with FP4 tensor cores
    (Blackwell) run MXFP8 activations first, `w4a8_mxfp4_mxfp8` ("recommended for Blackwell",
    aiconfigurator_core/sdk/common.py 0.12.0 MoEQuantMode), then the weight-only lane."""
    if dtype == "w4a16_mxfp4" and gpu.dense_fp4_tflops:
        return ("w4a8_mxfp4_mxfp8", dtype)
    return (dtype,)


def routing_distribution(model) -> str:
    """The MoE table's distribution that prices `model` (ROUTING constants above)."""
    return f"power_law_{POWER_LAW_ALPHA_MLA if model.attention == 'mla' else POWER_LAW_ALPHA}"


class PassMoe:
    """Measured routed experts of one MoE network (PassCoefficients c at tp, ep) on one table
    source; `parts_ms(S, t)` what they change in passes of S sequences x t positions."""

    def __init__(self, kernels: MeasuredKernels, c, model, tp: int, ep: int, gpu, params):
        self.kernels, self.c = kernels, c
        self.kfix_s = kernel_fixed_s(gpu, params)
        self.moe_layers = layer_counts(model, None)[1] if model.n_routed_experts else 0
        self.dtype = MOE_DTYPE_OF_FORMAT.get(expert_format(model), "")
        self.distribution = routing_distribution(model)
        self.key = (model.hidden_size, model.moe_intermediate_size, model.experts_per_token,
                    model.n_routed_experts, 1 if ep > 1 else tp, ep)
        col = None
        if self.moe_layers and self.dtype and c.moe is not None:
            for dtype in _dtype_lanes(self.dtype, gpu):
                col = moe_column(kernels.src, self.distribution, dtype, *self.key, kernels.peaks)
                if col is not None:
                    self.dtype = dtype
                    break
        self.tokens, self.latency_ms, self.kernel_source, self.rejections = (
            col if col is not None else (np.zeros(0), np.zeros(0), "", ()))
        self.latency_ms = monotone_in_tokens(self.latency_ms)
        self.applies = bool(self.tokens.size and np.isfinite(self.latency_ms).any())

    @property
    def label(self) -> str:
        src = self.kernels.src
        return f"{src.backend}-{src.version}"

    @property
    def why(self) -> str:
        """Why the routed experts keep the roofline ('' where they do not)."""
        if self.applies:
            return ""
        h, inter, k, E, mtp, mep = self.key
        return (f"routed experts h={h} I={inter} E={E} top-{k} moe_tp={mtp} moe_ep={mep} "
                f"{self.dtype or 'this format'} ({self.distribution}): no measured row in "
                f"{self.kernels.src.label}; priced from the roofline")

    def roofline_ms(self, S, t) -> np.ndarray:
        """The roofline's routed experts of passes (S, t) (flat arrays), all MoE layers, plus
        the fused kernels' fixed time: what the measured layer replaces, ms."""
        c = self.c
        S, t = np.asarray(S, float), np.asarray(t, float)
        mask = c.gemm_expert_mask
        rows_e, waited, _ = expert_rows_and_multiplicity(c.moe, S, t)
        G = len(c.gemm_weight_s)
        rows = np.broadcast_to(rows_e, (G, S.size))
        per_pass = np.broadcast_to(waited, (G, S.size))
        mem, comp = gemm_terms_s(c, rows, group=np.maximum(per_pass, 1.0),
                                 grouped=np.broadcast_to(mask[:, None], (G, S.size)))
        roof = _pnorm(mem * per_pass, comp * per_pass, c.sharpness_p)[mask].sum(axis=0)
        return (roof + self.moe_layers * FUSED_EXPERT_KERNELS * self.kfix_s) * 1e3

    def parts_ms(self, S, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(delta ms [N], measured ms [N], measured? [N]) of passes of S x t (flattened to N):
        measured - roofline of the routed experts where the table prices the pass, else 0."""
        S, t = (np.asarray(a, float).ravel() for a in np.broadcast_arrays(S, t))
        N = S.size
        if not self.applies:
            return np.zeros(N), np.zeros(N), np.zeros(N, bool)
        T = S * t
        one = along_axis(self.tokens, self.latency_ms, T)
        edge_T, edge_ms = self.tokens[-1], self.latency_ms[-1]
        above = T > edge_T
        roof = self.roofline_ms(S, t)
        if above.any() and np.isfinite(edge_ms):  # the roofline anchored to the table's edge
            roof_edge = self.roofline_ms(np.array([edge_T]), np.array([1.0]))[0] / self.moe_layers
            anchored = np.maximum(edge_ms / roof_edge * roof / self.moe_layers, edge_ms)
            one = np.where(above, anchored, one)
        measured = self.moe_layers * one
        ok = np.isfinite(measured) & (T > 0)
        return np.where(ok, measured - roof, 0.0), np.where(ok, measured, 0.0), ok
