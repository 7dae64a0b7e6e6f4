"""Shapes of today's decoders: the GEMMs, parameters, bytes and KV cache of a model preset.

Covers what ModelSpec's plain Llama formulas (presets.py) do not: Mixture-of-Experts layers
(routed experts, shared experts, router, leading dense layers), multi-head latent attention
(MLA), sliding-window layers, per-component number formats (formats.py) and EAGLE-3 heads.
design.md ("Mixture of Experts", "Attention variants", "Number formats") gives every formula.

Per decoder layer, with h hidden, H query heads, TP degree tp:
    attention GEMMs   GQA: QKV (h -> (q + 2 kv)/tp), O (q/tp -> h)
                      MLA (DeepSeek-V3, absorbed decode path): the fused down-projection
                      q_a + kv_a (h -> q_lora + kv_lora + rope, one GEMM, replicated on every
                      TP rank), q_b (q_lora -> H (nope + rope)/tp), kv_b (kv_lora -> H (nope +
                      v)/tp: the absorbed W_UK and W_UV, the same weights and FLOPs per token
                      as the naive up-projection), O (H v/tp -> h). The three engines run q_a
                      and kv_a as one GEMM on the same hidden states: vLLM `fused_qkv_a_proj`
                      (MergedColumnParallelLinear, disable_tp; model_executor/models/
                      deepseek_v2.py), SGLang `fused_qkv_a_proj_with_mqa` (ReplicatedLinear;
                      srt/models/deepseek_v2.py), TensorRT-LLM `kv_a_proj_with_mqa` of width
                      q_lora + kv_lora + rope (_torch/modules/attention.py, class MLA), as
                      AIConfigurator prices it (sdk/models/deepseek.py `downscale_gemm`);
                      without q_lora (DeepSeek-V2-Lite) q and kv_a stay two GEMMs
    dense FFN         gate/up (h -> 2 I/tp), down (I/tp -> h)     (first_k_dense_replace layers)
    MoE layer         router (h -> E, BF16, replicated); shared experts gate/up and down with
                      width n_shared x I_moe / tp; per touched routed expert gate/up
                      (h -> 2 I_moe / tp_e) and down (I_moe / tp_e -> h), tp_e = moe_tp = tp / ep:
                      tp with TP over the expert FFN (engines' default, ep 1), 1 with whole
                      experts per GPU (ep = tp), between them ep groups of tp / ep GPUs
    EAGLE-3 head      one dense layer whose QKV reads [embedding; hidden] (2h), an fc fusing
                      three target layers (3h -> h), its own LM head over draft_vocab_size
"""
from __future__ import annotations

from dataclasses import dataclass

from src.costmodel.formats import format_bytes

BF16 = "bf16"


@dataclass(frozen=True)
class Gemm:
    """One GEMM kind of a pass: K x N weights, run `count` times per pass (once per layer that
    has it), weights stored in `fmt`; role "layer", "shared" (a MoE layer's shared experts: a
    layer GEMM an engine may overlap with the routed experts), "expert" (one routed expert: the
    pass runs it once per touched expert) or "head" (LM head and projections run once per
    pass)."""

    k: float
    n: float
    count: float
    fmt: str
    role: str


def is_moe(m) -> bool:
    return m.n_routed_experts > 0


def expert_format(m) -> str:
    return m.expert_weight_format or m.weight_format


def layer_counts(m, n_layers: int | None = None) -> tuple[int, int]:
    """(dense-FFN layers, MoE layers) of a pass over n_layers (None = all) of m's layers; a pass
    over fewer layers (an EAGLE or MTP head of the target's shape) runs the last ones."""
    L = m.n_layers if n_layers is None else n_layers
    if not is_moe(m):
        return L, 0
    dense = max(0, m.first_k_dense_replace - (m.n_layers - L))
    return dense, L - dense


def window_layers(m, n_layers: int | None = None) -> int:
    """Sliding-window layers of a pass (a one-layer head of the target's shape: full attention)."""
    if not m.sliding_window_tokens or (n_layers is not None and n_layers != m.n_layers):
        return 0
    return m.sliding_window_layers


def attention_widths(m) -> tuple[float, float]:
    """(query width, per-token cached key/value values per layer before TP) of m's attention:
    GQA: (H d, 2 KV d); MLA: (H (nope + rope), kv_lora + rope), the latent KV being one
    shared vector per token."""
    if m.attention == "mla":
        return m.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), (m.kv_lora_rank
                                                                         + m.qk_rope_head_dim)
    return m.n_heads * m.head_dim, 2 * m.n_kv_heads * m.head_dim


def attention_gemms(m, tp: int, L: int) -> list[Gemm]:
    h, f = m.hidden_size, m.weight_format
    if m.attention == "mla":
        H = m.n_heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        latent = m.kv_lora_rank + m.qk_rope_head_dim
        if m.q_lora_rank:  # q_a and kv_a fused: one down-projection GEMM (module docstring)
            out = [Gemm(h, m.q_lora_rank + latent, L, f, "layer"),
                   Gemm(m.q_lora_rank, H * qk / tp, L, f, "layer")]
        else:
            out = [Gemm(h, H * qk / tp, L, f, "layer"), Gemm(h, latent, L, f, "layer")]
        return out + [Gemm(m.kv_lora_rank, H * (m.qk_nope_head_dim + m.v_head_dim) / tp, L, f,
                           "layer"),
                      Gemm(H * m.v_head_dim / tp, h, L, f, "layer")]
    q, kv = m.q_width, m.kv_width
    k_in = 2 * h if m.architecture == "eagle3" else h
    return [Gemm(k_in, q / tp + 2 * kv / kv_head_divisor(m, tp), L, f, "layer"),
            Gemm(q / tp, h, L, f, "layer")]


def kv_head_divisor(m, tp: int) -> int:
    """What TP divides the KV heads by: tp, or n_kv_heads where tp exceeds them (each GPU then
    holds one KV head, replicated tp / n_kv_heads times, as vLLM and SGLang do)."""
    return min(tp, m.n_kv_heads)


def layer_gemms(m, tp: int, n_layers: int | None = None, ep: int = 1) -> list[Gemm]:
    """Every GEMM kind of the decoder layers of one pass (see the module docstring)."""
    h = m.hidden_size
    dense, moe = layer_counts(m, n_layers)
    out = attention_gemms(m, tp, dense + moe)
    if dense:
        inter, f = m.intermediate_size, m.weight_format
        out += [Gemm(h, 2 * inter / tp, dense, f, "layer"), Gemm(inter / tp, h, dense, f, "layer")]
    if moe:
        out.append(Gemm(h, m.n_routed_experts, moe, BF16, "layer"))  # router
        if m.n_shared_experts:
            shared = m.n_shared_experts * m.moe_intermediate_size
            out += [Gemm(h, 2 * shared / tp, moe, m.weight_format, "shared"),
                    Gemm(shared / tp, h, moe, m.weight_format, "shared")]
        tp_e = tp // ep  # moe_tp: each expert's FFN split over tp / ep GPUs (variants.check_ep)
        im, fe = m.moe_intermediate_size, expert_format(m)
        out += [Gemm(h, 2 * im / tp_e, moe, fe, "expert"), Gemm(im / tp_e, h, moe, fe, "expert")]
    return out


def head_gemms(m, tp: int, extra_gemms=()) -> list[Gemm]:
    """LM head (BF16, vocab split by TP; an EAGLE-3 head's own draft vocabulary) and the extra
    once-per-pass projections (K, N), unsplit by TP."""
    vocab = m.draft_vocab_size or m.vocab_size
    return [Gemm(m.hidden_size, vocab / tp, 1, BF16, "head")] + [
        Gemm(k, n, 1, BF16, "head") for k, n in extra_gemms]


def elementwise_values_per_token(m, tp: int, n_layers: int | None = None, ep: int = 1) -> float:
    """Elementwise values read + written per token, all layers of a pass: 2 RMSNorms and 2
    residual adds (10 h, replicated), rotary on q and k, the SwiGLU activation of the dense FFN /
    shared experts (3 I / tp) and of the k routed experts each token goes through."""
    h = m.hidden_size
    q, kv = attention_widths(m)
    kv_tp = kv if m.attention == "mla" else kv / kv_head_divisor(m, tp)
    dense, moe = layer_counts(m, n_layers)
    base = 4 * h + 6 * h + 2 * q / tp + kv_tp
    total = dense * (base + 3 * m.intermediate_size / tp)
    if moe:
        routed = m.experts_per_token * m.moe_intermediate_size / (tp // ep) / ep
        total += moe * (base + 3 * (m.n_shared_experts * m.moe_intermediate_size) / tp
                        + 3 * routed + m.n_routed_experts)
    return total


def kv_values_per_token_layer(m, tp: int) -> float:
    """Cached values per token per layer on one GPU (MLA's latent is replicated over TP)."""
    _, kv = attention_widths(m)
    return kv / kv_tp_divisor(m, tp)


def attention_pair_flops(m, tp: int) -> float:
    """FLOPs per (query, key) pair per layer on one GPU: GQA 4 (H/tp) d; MLA on the absorbed
    path 2 (H/tp) (2 kv_lora + rope) (scores over kv_lora + rope, values over kv_lora)."""
    if m.attention == "mla":
        return 2 * m.n_heads / tp * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
    return 4 * m.q_width / tp


def attention_new_token_values(m, tp: int) -> float:
    """Values written/read per new token per layer besides the cached keys: KV write, Q read,
    O write (MLA: the latent write, the absorbed query and the latent output per head)."""
    if m.attention == "mla":
        lat = m.kv_lora_rank + m.qk_rope_head_dim
        return lat + m.n_heads / tp * (lat + m.kv_lora_rank)
    return 2 * m.kv_width / kv_head_divisor(m, tp) + 2 * m.q_width / tp


# ---------------------------------------------------------------- parameters and bytes


def _attention_params(m) -> float:
    h = m.hidden_size
    if m.attention == "mla":
        H, qk = m.n_heads, m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * H * qk if m.q_lora_rank
             else h * H * qk)
        kv = (h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
              + m.kv_lora_rank * H * (m.qk_nope_head_dim + m.v_head_dim))
        return q + kv + H * m.v_head_dim * h
    q, kv = m.q_width, m.kv_width
    k_in = 2 * h if m.architecture == "eagle3" else h
    return k_in * (q + 2 * kv) + (q + 2 * kv if m.qkv_bias else 0) + q * h


def component_params(m, n_layers: int | None = None) -> dict[str, float]:
    """Parameters by component: attention (+ norms), dense FFN, shared experts, routers, routed
    experts (all E), embedding, LM head (0 if tied), final norm, EAGLE-3 fc."""
    h = m.hidden_size
    dense, moe = layer_counts(m, n_layers)
    L = dense + moe
    embed = m.vocab_size * h
    head = (m.draft_vocab_size or m.vocab_size) * h
    return {
        "attention": L * (_attention_params(m) + 2 * h),
        "dense_ffn": dense * 3 * h * m.intermediate_size,
        "shared_experts": moe * 3 * h * m.n_shared_experts * m.moe_intermediate_size,
        "router": moe * h * m.n_routed_experts,
        "routed_experts": moe * m.n_routed_experts * 3 * h * m.moe_intermediate_size,
        "embedding": embed,
        "lm_head": 0 if m.tied_embeddings else head,
        "final_norm": h,
        "fc": m.eagle3_fused_layers * h * h if m.architecture == "eagle3" else 0,
    }


def component_formats(m) -> dict[str, str]:
    f = m.weight_format
    return {"attention": f, "dense_ffn": f, "shared_experts": f, "router": BF16,
            "routed_experts": expert_format(m), "embedding": BF16, "lm_head": BF16,
            "final_norm": BF16, "fc": BF16}


def total_params(m) -> float:
    return sum(component_params(m).values())


def active_params(m) -> float:
    """Parameters one token goes through: all but the routed experts it is not routed to."""
    p = component_params(m)
    if is_moe(m):
        p["routed_experts"] *= m.experts_per_token / m.n_routed_experts
    return sum(p.values())


def weight_bytes(m) -> float:
    """Bytes of all weights, each component in its own format (scales included)."""
    fmt = component_formats(m)
    return sum(n * format_bytes(fmt[c]) for c, n in component_params(m).items())


def kv_bytes_per_token(m) -> float:
    """KV-cache bytes per cached token, the full-attention layers (every layer but the
    sliding-window ones), before TP."""
    _, kv = attention_widths(m)
    return (m.n_layers - window_layers(m)) * kv * format_bytes(m.kv_cache_format)


def window_kv_bytes_per_seq(m) -> float:
    """KV-cache bytes per sequence of the sliding-window layers: each holds at most the window
    (vLLM's hybrid KV-cache manager frees blocks that slid out), before TP."""
    _, kv = attention_widths(m)
    return window_layers(m) * kv * m.sliding_window_tokens * format_bytes(m.kv_cache_format)


def kv_tp_divisor(m, tp: int) -> int:
    """What TP divides the KV cache by: tp for GQA (KV heads split; at most n_kv_heads, beyond
    which KV heads are replicated), 1 for MLA (the latent is replicated)."""
    return 1 if m.attention == "mla" else kv_head_divisor(m, tp)


def mtp_module_params(m) -> dict[str, float]:
    """One DeepSeek MTP module: one decoder layer of the target's last-layer type, the eh_proj
    (2h -> h) and two RMSNorms (enorm, hnorm) plus its final norm; embedding and LM head shared
    with the target (DeepSeek-V3 README_WEIGHTS.md)."""
    p = component_params(m, n_layers=1)
    h = m.hidden_size
    for k in ("embedding", "lm_head"):
        p[k] = 0
    p["fc"] = 2 * h * h + 2 * h
    return p


def params_bytes(m, params: dict[str, float]) -> float:
    fmt = component_formats(m)
    return sum(n * format_bytes(fmt[c]) for c, n in params.items())



def dense_equivalent(m):
    """A dense model of the same active size: the MoE with only its k routed experts (E = k), so
    every token goes through the same k experts (and the shared ones) - the FFN width one token
    uses, in the same formats and kernels - and every pass reads exactly k experts per layer.
    For "MoE against dense" comparisons: the same bytes and FLOPs per token at batch 1 (the
    router shrinks from h x E to h x k), none of the experts-touched growth with more tokens."""
    from dataclasses import replace

    if not is_moe(m):
        return m
    return replace(m, model_id=f"{m.model_id}-dense-equivalent",
                   n_routed_experts=m.experts_per_token, routing="uniform",
                   routing_locality_fraction=None, mtp_layers=0)
