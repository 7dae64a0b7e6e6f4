"""Drafts and footprints: the network each draft kind runs and the memory it and the target take.

Kinds (DraftSpec.kind):
    model   a stand-alone draft model on its own TP degree (its weights and KV cache)
    eagle   an EAGLE(-1/2) head: one decoder layer of the target's shape + a 2h -> h fc, sharing
            the target's embedding and LM head (Li et al. 2024, arXiv 2401.15077); for a MoE
            target a dense layer of its intermediate_size (eagle_head_from_target)
    eagle3  an EAGLE-3 head (Li et al. 2025, arXiv 2503.01840): one dense decoder layer of the
            target's hidden size whose QKV reads [token embedding; fused feature] (2h), an fc
            fusing the hidden states of three target layers (3h -> h), and its own LM head over
            a smaller draft vocabulary where the head has one (draft_vocab_size, mapped back by
            a d2t table); the embedding is the target's. Shape from its preset (a models.toml
            entry with architecture = "eagle3" or its config.json), or, named just "eagle3",
            derived from a GQA target: the target's attention, intermediate_size and vocabulary
    mtp     DeepSeek's multi-token-prediction module (DeepSeek-V3 report, arXiv 2412.19437,
            section 2.2): one decoder layer of the target's last-layer type (for DeepSeek-V3 an
            MLA + MoE layer) after an eh_proj fusing [embedding; hidden] (2h -> h), sharing the
            target's embedding and LM head; applied autoregressively for gamma > 1 (vLLM and
            SGLang run the one module gamma times)
    ngram   prompt lookup on the host; self: the target itself on a compressed KV cache
Each network-drafting kind is priced by roofline.pass_coefficients on its own shape (one pass per
draft token); its KV cache is one layer of its own (eagle: of the target's shape).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import src.costmodel.shapes as shapes
from src.costmodel.engines import DRAFT_KINDS
from src.costmodel.formats import format_bytes
from src.costmodel.presets import (
    BYTES_PER_VALUE,
    CostModelInputError,
    ModelSpec,
    check_tp,
)
from src.costmodel.roofline import pass_coefficients

# kinds engines run through the same proposer as EAGLE: vLLM V1's EagleProposer serves "eagle",
# "eagle3" and "mtp" methods; SGLang's EAGLEWorker serves EAGLE, EAGLE3 and NEXTN (MTP). An engine
# profile's per-kind mechanisms (cpu_overlap_draft_kinds) listing "eagle" apply to them too.
DRAFT_KIND_FAMILY = {"eagle3": "eagle", "mtp": "eagle"}
STATEFUL_DRAFT_KINDS = ("model", "eagle", "eagle3", "mtp")  # drafts with a KV cache of their own


def kind_listed(kind: str, listed) -> bool:
    """Whether an engine mechanism listing draft kinds applies to `kind` (or its family)."""
    return kind in listed or DRAFT_KIND_FAMILY.get(kind, kind) in listed


@dataclass(frozen=True)
class DraftSpec:
    """How draft tokens are produced (see the module docstring for the kinds).

    kind "model": a stand-alone draft model (`model`) on `tp` GPUs (its own weights and KV cache;
    it shares GPU 0 with the target). kinds "eagle", "eagle3" and "mtp" run at the target's TP
    ("eagle3": `model` is the head's preset, None = derived from the target). kind "ngram":
    prompt lookup on the host (engine's ngram_pass_cpu_ms per pass). kind "self":
    self-speculation (MagicDec, Chen et al. 2024): the target network itself at the target's TP,
    no extra weights, attending to a compressed KV cache of at most `kv_budget_tokens` tokens per
    sequence (StreamingLLM-style sink + window).

    kv_budget_tokens (network kinds; None = full context): each draft pass reads at most this
    many cached tokens per sequence, min(context, budget), and the draft keeps at most this many
    tokens of KV per sequence.
    """

    kind: str = "model"
    model: ModelSpec | None = None  # the draft network for kinds "model", "self", "eagle3"
    tp: int = 1  # TP degree of the draft network
    kv_budget_tokens: int | None = None  # cap on the draft's KV per sequence; None = no cap


def eagle3_head_from_target(target: ModelSpec) -> ModelSpec:
    """An EAGLE-3 head derived from a GQA target: one dense layer with the target's attention,
    intermediate_size and vocabulary, BF16."""
    if target.attention != "gqa":
        raise CostModelInputError("draft", f"an EAGLE-3 head cannot be derived from "
                                  f"{target.model_id}'s {target.attention} attention; allowed: "
                                  "an eagle3 head preset or its config.json")
    return replace(
        target, model_id=f"{target.model_id}-eagle3", n_layers=1, architecture="eagle3",
        n_routed_experts=0, experts_per_token=0, moe_intermediate_size=0, n_shared_experts=0,
        first_k_dense_replace=0, sliding_window_tokens=0, sliding_window_layers=0,
        weight_format="bf16", expert_weight_format="", kv_cache_format="bf16", mtp_layers=0,
        draft_vocab_size=0, tied_embeddings=False)


def eagle_head_from_target(target: ModelSpec) -> ModelSpec:
    """The one decoder layer of an EAGLE(-1/2) head for a non-plain target: the target's
    attention with a dense SwiGLU of the target's intermediate_size, full attention, BF16 (EAGLE's
    cnets.py builds a LlamaDecoderLayer from the head's config; its Mixtral head has the dense
    intermediate_size 14336), with the head's own KV heads where the preset gives them
    (eagle_head_n_kv_heads: Mixtral's head has 32, its target 8)."""
    return replace(
        target, n_kv_heads=target.eagle_head_n_kv_heads or target.n_kv_heads,
        n_routed_experts=0, experts_per_token=0, moe_intermediate_size=0,
        n_shared_experts=0, first_k_dense_replace=0, sliding_window_tokens=0,
        sliding_window_layers=0, weight_format="bf16", expert_weight_format="",
        kv_cache_format="bf16", mtp_layers=0)


def target_footprint(model: ModelSpec, tp: int) -> tuple[float, float, float]:
    """(weight bytes, KV bytes per cached token, KV bytes per sequence) on one GPU of a model at
    TP tp: weights / tp; the full-attention layers' cache / tp (MLA: replicated); the
    sliding-window layers' cache, at most W tokens per sequence."""
    if model.is_plain and tp <= model.n_kv_heads:
        return model.weight_bytes / tp, model.kv_bytes_per_token / tp, 0.0
    div = shapes.kv_tp_divisor(model, tp)
    return (model.weight_bytes / tp, model.kv_bytes_per_token / div,
            shapes.window_kv_bytes_per_seq(model) / div)


def draft_network(gpu, target: ModelSpec, tp: int, d: DraftSpec, params, allreduce, ar: dict):
    """(pass coefficients or None, weight bytes, KV bytes per token, KV bytes per sequence) of
    the draft on GPU 0 (the KV terms before any kv_budget_tokens cap; ngram: no network, self:
    the target's coefficients are reused by the caller)."""
    h = target.hidden_size
    if d.kind == "model":
        if d.model is None:
            raise CostModelInputError("draft", "kind 'model' needs a draft model preset")
        check_tp(d.model, d.tp, "draft_tp")
        c = pass_coefficients(gpu, d.model, d.tp, params, allreduce, **ar)
        return (c, *target_footprint(d.model, d.tp))
    if d.kind == "eagle":
        if target.is_plain and tp <= target.n_kv_heads:
            c = pass_coefficients(gpu, target, tp, params, allreduce, n_layers=1,
                                  extra_gemms=[(2 * h, h)], **ar)
            weight = (target.layer_params / tp + 2 * h * h) * BYTES_PER_VALUE
            return c, weight, target.kv_bytes_per_token / target.n_layers / tp, 0.0
        head = eagle_head_from_target(target)
        c = pass_coefficients(gpu, head, tp, params, allreduce, n_layers=1,
                              extra_gemms=[(2 * h, h)], **ar)
        layer = shapes.component_params(head, n_layers=1)
        layer.update(embedding=0, lm_head=0, final_norm=0, fc=2 * h * h)
        kv = shapes.kv_values_per_token_layer(head, tp) * format_bytes(head.kv_cache_format)
        return c, shapes.params_bytes(head, layer) / tp, kv, 0.0
    if d.kind == "mtp":
        if target.mtp_layers < 1:
            raise CostModelInputError(
                "draft", f"kind 'mtp' needs a target with an MTP module (config.json "
                f"num_nextn_predict_layers >= 1); {target.model_id} has none; allowed: "
                "eagle, eagle3, ngram, a draft model")
        c = pass_coefficients(gpu, target, tp, params, allreduce, n_layers=1,
                              extra_gemms=[(2 * h, h)], **ar)
        weight = shapes.params_bytes(target, shapes.mtp_module_params(target)) / tp
        kv = (shapes.kv_values_per_token_layer(target, tp)
              * format_bytes(target.kv_cache_format))
        return c, weight, kv, 0.0
    if d.kind == "eagle3":
        head = d.model if d.model is not None else eagle3_head_from_target(target)
        if head.hidden_size != h:
            raise CostModelInputError("draft", f"EAGLE-3 head {head.model_id} has hidden_size "
                                      f"{head.hidden_size}; its target {target.model_id} has {h}")
        check_tp(head, tp, "tp")
        c = pass_coefficients(gpu, head, tp, params, allreduce,
                              extra_gemms=[(head.eagle3_fused_layers * h, h)], **ar)
        own = shapes.component_params(head)
        own["embedding"] = 0  # the target's embedding (vLLM and SGLang share it)
        kv = (shapes.kv_values_per_token_layer(head, tp) * head.n_layers
              * format_bytes(head.kv_cache_format))
        return c, shapes.params_bytes(head, own) / tp, kv, 0.0
    raise CostModelInputError("draft", f"unknown kind '{d.kind}'; allowed: "
                              f"{', '.join(DRAFT_KINDS)}")
