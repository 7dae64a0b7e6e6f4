"""Sampling at temperature > 0: the probability traffic of the sampler and the rejection sampler.

At temperature 0 the engines take an argmax of the logits and this module adds nothing. At T > 0
every decoding row pays a sampling pass over the vocabulary, and a verification of t = K + 1
positions per sequence pays the rejection sampler's passes over [S K, V] (vLLM) or [S t, V]
(SGLang) probabilities. Both are elementwise passes over fp32 rows of V entries: memory traffic,
priced as bytes / (peak DRAM bandwidth x the cost model's memory_bandwidth_efficiency_fraction)
and added to the target pass (HardwareCostModel._table_ms, which the compiled serving engine's
step prices read too). Bytes per (row, vocabulary entry), read + written, as each engine's source
implements it (design.md, "Sampling at temperature > 0"):

vLLM V1 (vllm/v1/sample/rejection_sampler.py @7f6fc1c5; vllm/v1/sample/sampler.py and
ops/topk_topp_sampler.py, random_sample: probs.div_(q).argmax with q ~ Exp(1)):
    plain sampling row (decode, and the verification's bonus row):
        bf16 -> fp32 cast 2 + 4, temperature div_ 4 + 4, softmax 4 + 4, q.exponential_ 4,
        probs.div_(q) 4 + 4 + 4, argmax 4                                         = 42 B
    each of the K draft rows of a verification (RejectionSampler.forward):
        .to(float32) 2 + 4, .clone() 4 + 4 (the default raw-logprobs mode), div_ 4 + 4,
        softmax 4 + 4, sample_recovered_tokens_kernel reads target_probs 4 and q[req] 4 = 38 B
    plus q [S, V] fp32 written once per verification (q.exponential_)            =  4 B per seq
    draft_probs: none read; the model runner passes draft_probs=None (NO_DRAFT_PROBS).
SGLang (python/sglang/srt/speculative/eagle_info.py EagleVerifyInput.verify @0007d13b;
python/sglang/srt/layers/sampler.py @001733e9), fp32 logits:
    plain sampling row: temperature div_ 4 + 4, softmax 4 + 4,
        top_k_top_p_sampling_from_probs reads probs once 4                         = 20 B
    each of the t = draft_token_num rows of a verification: logits / T 4 + 4, softmax 4 + 4,
        top_k_renorm_prob 4 + 4, draft_probs = torch.zeros(...) 4                  = 28 B
    plus tree_speculative_sampling_target_only's residual draw at the one rejected position
        per request: target_probs and draft_probs rows 4 + 4                       =  8 B per seq
TensorRT-LLM and the other profiles: the vLLM V1 form is assumed (not read from their source).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TEMPERATURE_RANGE = (0.0, 2.0)  # the --temperature range the commands take (issue 24, section 5)


@dataclass(frozen=True)
class SamplerTraffic:
    """Bytes per (row, vocabulary entry) of one engine's sampling passes at T > 0."""

    engine_family: str  # "vllm" or "sglang": whose source the figures are read from
    plain_row_bytes: float  # a sampled decoding row (and vLLM's bonus row)
    verify_row_bytes: float  # each verified row (vLLM: the K draft rows; SGLang: all t rows)
    verify_rows_include_bonus: bool  # SGLang: the t = K + 1 rows; vLLM: K rows + a plain row
    verify_per_seq_bytes: float  # per sequence and vocabulary entry, once per verification


VLLM_V1 = SamplerTraffic("vllm", plain_row_bytes=2 + 4 + 8 + 8 + 4 + 12 + 4,
                         verify_row_bytes=6 + 8 + 8 + 8 + 8, verify_rows_include_bonus=False,
                         verify_per_seq_bytes=4)
SGLANG = SamplerTraffic("sglang", plain_row_bytes=8 + 8 + 4, verify_row_bytes=8 + 8 + 8 + 4,
                        verify_rows_include_bonus=True, verify_per_seq_bytes=8)


def sampler_traffic(engine_name: str) -> SamplerTraffic:
    """The sampler form of an engine profile: SGLang's for the sglang profiles, else vLLM V1's
    (TensorRT-LLM, vllm-2024 and the PyTorch profiles: assumed, see the module docstring)."""
    return SGLANG if engine_name.startswith("sglang") else VLLM_V1


def sampling_bytes(traffic: SamplerTraffic, n_seqs, positions_per_seq, vocab_size: int):
    """Bytes the sampling of one pass moves: n_seqs sequences of positions_per_seq positions
    (t = 1 a decode, t = K + 1 a verification); arrays broadcast; 0 where either is 0."""
    S = np.asarray(n_seqs, dtype=float)
    t = np.asarray(positions_per_seq, dtype=float)
    V = float(vocab_size)
    plain = traffic.plain_row_bytes * S * V
    if traffic.verify_rows_include_bonus:
        verify = (traffic.verify_row_bytes * t + traffic.verify_per_seq_bytes) * S * V
    else:
        verify = plain + (traffic.verify_row_bytes * (t - 1)
                          + traffic.verify_per_seq_bytes) * S * V
    return np.where(t > 1, verify, np.where(t > 0, plain, 0.0))


def sampling_ms_table(traffic: SamplerTraffic, max_seqs: int, max_positions: int,
                      vocab_size: int, bandwidth_bytes_per_s: float) -> np.ndarray:
    """[max_seqs + 1, max_positions + 1] ms of the sampling passes, entry [S, t]."""
    S, t = np.indices((max_seqs + 1, max_positions + 1))
    return sampling_bytes(traffic, S, t, vocab_size) / bandwidth_bytes_per_s * 1e3
