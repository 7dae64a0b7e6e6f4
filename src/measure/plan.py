"""What `measure` times: the configurations, their memory need, and a planning estimate.

Pure Python (no torch), so a plan can be checked, printed (`--dry-run`) and tested anywhere.

A configuration is one row of the output: (model, mode, what, attention backend, batch,
positions, context). `forward` and `attention_only` rows are decode/verification steps: `batch`
sequences with `context` tokens cached, each scoring `positions` new tokens. `prefill` rows are
`batch` prompts of `positions` tokens with an empty cache (context 0).

Memory of one configuration on the GPU, beside the model's weights:
    KV cache    = batch x (context + positions) x kv_bytes_per_token   (BF16, every layer)
    activations = tokens x per-token intermediates + logits            (an upper bound, below)
A configuration runs only when KV cache + activations + a safety margin fit in the memory
still free after the weights are loaded; the rest are skipped with a note, never attempted.

The time estimate (what `--dry-run` prints and the GPU script budgets with) takes one step's time
from the project's own hardware cost model for a GPU preset and counts the runs `measure` makes:
one untimed eager run before graph capture, `warmup` untimed runs, then the timed repetitions,
plus a fixed cost per configuration for Python-side capture and setup. It is a planning figure,
not a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from src.costmodel import (
    CostModelInputError,
    CostModelParams,
    GpuSpec,
    ModelSpec,
    forward_pass_breakdown,
)

MODES = ("graph", "eager")
ATTENTION_BACKENDS = ("flash", "cudnn", "efficient", "math")
WHATS = ("forward", "attention_only", "prefill")
# The column layout `calibrate` reads (the project's measurement format; README "Measure your own
# GPU"). Times are milliseconds over `reps` timed repetitions.
COLUMNS = ("model", "mode", "what", "attention_backend", "batch", "positions", "context", "tokens",
           "median_ms", "p10_ms", "p90_ms", "min_ms", "reps")
BYTES_PER_VALUE = 2  # BF16 weights, activations and KV cache
GIB = 1024 ** 3

# Kernels one decoder layer of model.py launches (RMSNorm alone is 8 elementwise kernels), as
# model.kernels_per_step counts them (tests/test_measure_model.py keeps the two equal).
KERNELS_PER_LAYER = 34
# Planning assumptions of the time estimate (not measurements): the CPU time of one eager kernel
# launch from Python, and the Python-side cost per configuration (capture, setup).
EAGER_LAUNCH_US = 12.0
SETUP_S_PER_CONFIG = 0.05
# Planning margin on the cost model's step time, which is an ideal implementation's: before
# calibration it was 25-39% below the H200 step times of a plain implementation at the median.
STEP_TIME_MARGIN = 1.5
CAPTURE_US_PER_KERNEL = 40.0
# Memory safety margin beside the plan's own accounting: the larger of this and 3% of the GPU.
MARGIN_MIN_BYTES = 2 * GIB
MARGIN_FRACTION = 0.03


@dataclass(frozen=True)
class Config:
    """One configuration to time: one row of the output CSV."""

    model: str  # the `model` column: the preset id, or tiny-<id> for a --tiny smoke run
    mode: str  # graph | eager
    what: str  # forward | attention_only | prefill
    attention: str  # SDPA backend: flash | cudnn | efficient | math
    batch: int  # sequences (prompts for prefill)
    positions: int  # new tokens per sequence (prompt length for prefill)
    context: int  # tokens already cached per sequence (0 for prefill)

    @property
    def tokens(self) -> int:
        return self.batch * self.positions

    @property
    def cache_tokens_per_seq(self) -> int:
        """KV-cache slots one sequence needs: the context plus the new positions."""
        return self.context + self.positions

    def label(self) -> str:
        return (f"{self.model} {self.mode} {self.what} {self.attention} B={self.batch} "
                f"pos={self.positions} ctx={self.context}")


@dataclass(frozen=True)
class RepPolicy:
    """How many times a configuration runs: `warmup` untimed runs, then enough timed repetitions
    for about `target_ms` of timed GPU work, at least `min_reps` and at most `max_reps`."""

    target_ms: float = 100.0
    min_reps: int = 5
    max_reps: int = 100
    warmup: int = 2

    def reps(self, step_ms: float) -> int:
        """reps = clamp(ceil(target_ms / step_ms), min_reps, max_reps)."""
        wanted = math.ceil(self.target_ms / max(step_ms, 1e-6))
        return max(self.min_reps, min(self.max_reps, wanted))


def tiny_spec(spec: ModelSpec) -> ModelSpec:
    """A 2-layer model with the preset's GQA group (query heads per KV head) and tied-ness, small
    enough for a CPU smoke run: 2 KV heads of dimension 16, MLP 4x hidden, vocabulary 1024."""
    group = spec.n_heads // spec.n_kv_heads
    n_heads = 2 * group
    hidden = n_heads * 16
    return replace(spec, model_id=f"tiny-{spec.model_id}", n_layers=2, hidden_size=hidden,
                   n_heads=n_heads, n_kv_heads=2, head_dim=16, intermediate_size=4 * hidden,
                   vocab_size=1024)


def build_configs(models: list[tuple[str, tuple[int, ...]]], whats: tuple[str, ...],
                  modes: tuple[str, ...], attentions: tuple[str, ...], batches: tuple[int, ...],
                  contexts: tuple[int, ...], prefill_lengths: tuple[int, ...],
                  prefill_batches: tuple[int, ...]) -> list[Config]:
    """Every configuration, in measuring order: model, what, mode, context, batch, positions,
    attention backend innermost (so both kernels of one shape run back to back).

    `models` holds (model column, positions of its decode/verification steps) per model."""
    out = []
    for model, positions in models:
        for what in whats:
            for mode in modes:
                if what == "prefill":
                    grid = [(b, length, 0) for b in prefill_batches for length in prefill_lengths]
                else:
                    grid = [(b, p, c) for c in contexts for b in batches for p in positions]
                for batch, pos, ctx in grid:
                    for attention in attentions:
                        out.append(Config(model, mode, what, attention, batch, pos, ctx))
    return out


def kv_cache_bytes(spec: ModelSpec, config: Config) -> int:
    """batch x (context + positions) x 2 (K, V) x layers x KV heads x head dim x 2 bytes."""
    return config.batch * config.cache_tokens_per_seq * spec.kv_bytes_per_token


def activation_bytes(spec: ModelSpec, config: Config) -> int:
    """An upper bound on the step's intermediates alive at once (1.5x the count below).

    Per token of a decoder layer: 6 hidden-wide FP32 tensors (RMSNorm), 6 hidden-wide BF16
    (residual stream, norm outputs), 8 QKV-wide BF16 (projection, rotary, cache write), 4
    query-wide BF16 (attention input/output), 4 MLP-wide BF16 (gate/up is 2 wide, SiLU, product).
    Layers run one after another, so one layer's worth is live. Plus the logits (every position
    for forward, the last prompt position for prefill) and, for prefill, K and V repeated to
    the query heads for causal attention. attention_only's layers keep only Q, K, V and the
    output, beside the hidden state, the final norm and the logits."""
    tokens = config.tokens
    h, q, kv, inter = spec.hidden_size, spec.q_width, spec.kv_width, spec.intermediate_size
    if config.what == "attention_only":
        per_token = 4 * h * 4 + (2 * q + 2 * kv + 2 * h) * BYTES_PER_VALUE
        return int(1.5 * tokens * (per_token + spec.vocab_size * BYTES_PER_VALUE))
    per_token = 6 * h * 4 + (6 * h + 8 * (q + 2 * kv) + 4 * q + 4 * inter) * BYTES_PER_VALUE
    logit_rows = config.batch if config.what == "prefill" else tokens
    total = tokens * per_token + logit_rows * spec.vocab_size * BYTES_PER_VALUE
    if config.what == "prefill":
        total += 2 * tokens * q * BYTES_PER_VALUE
    return int(1.5 * total)


def memory_margin_bytes(total_bytes: float) -> float:
    return max(MARGIN_MIN_BYTES, MARGIN_FRACTION * total_bytes)


def config_bytes(spec: ModelSpec, config: Config) -> int:
    """What one configuration needs beside the weights: its KV cache and its activations."""
    return kv_cache_bytes(spec, config) + activation_bytes(spec, config)


def split_by_memory(specs: dict[str, ModelSpec], configs: list[Config], total_bytes: float
                    ) -> tuple[list[Config], list[tuple[Config, str]]]:
    """(configs that fit, [(config, reason)] for those that do not), planning with a GPU of
    `total_bytes` on which the model's weights are the only other resident."""
    margin = memory_margin_bytes(total_bytes)
    keep, skipped = [], []
    for c in configs:
        spec = specs[c.model]
        free = total_bytes - spec.weight_bytes - margin
        need = config_bytes(spec, c)
        if need > free:
            skipped.append((c, f"needs {need / GIB:.1f} GiB beside the weights, "
                               f"{max(free, 0) / GIB:.1f} GiB available"))
        else:
            keep.append(c)
    return keep, skipped


def estimate_step_ms(spec: ModelSpec, config: Config, gpu: GpuSpec, params: CostModelParams
                     ) -> float:
    """One step's time for planning: the project's cost model (GPU time, no CPU overhead) times
    STEP_TIME_MARGIN.

    prefill is costed as a non-causal pass with the LM head on every position (an overestimate);
    eager as the larger of that and one Python launch per kernel."""
    try:
        b = forward_pass_breakdown(gpu, spec, 1, config.batch, config.positions, config.context,
                                   params, include_step_overhead=False)
        ms = b.attention_ms + b.lm_head_ms if config.what == "attention_only" else b.total_ms
    except CostModelInputError:  # beyond the preset GPU's memory: weights + KV at the bandwidth
        moved = spec.weight_bytes + kv_cache_bytes(spec, config)
        ms = moved / gpu.memory_bandwidth_bytes_per_s * 1e3
    ms *= STEP_TIME_MARGIN
    if config.mode == "eager":
        kernels = kernels_per_step(spec, config)
        ms = max(ms, kernels * EAGER_LAUNCH_US * 1e-3)
    return ms


def kernels_per_step(spec: ModelSpec, config: Config) -> int:
    """Kernels of one step: KERNELS_PER_LAYER per layer plus 11 outside the layers (embedding,
    final RMSNorm, LM head, argmax); 3 per layer for attention_only (two cache writes, SDPA)."""
    per_layer = 3 if config.what == "attention_only" else KERNELS_PER_LAYER
    return spec.n_layers * per_layer + 11


def estimate_config_s(spec: ModelSpec, config: Config, policy: RepPolicy, step_ms: float
                      ) -> float:
    """Seconds `measure` spends on one configuration: setup, one eager run before capture (graph
    mode), the untimed warm-up runs, the timed repetitions, and capture of each kernel."""
    runs = (1 if config.mode == "graph" else 0) + policy.warmup + policy.reps(step_ms)
    capture_s = (kernels_per_step(spec, config) * CAPTURE_US_PER_KERNEL * 1e-6
                 if config.mode == "graph" else 0.0)
    return SETUP_S_PER_CONFIG + capture_s + runs * step_ms * 1e-3


def estimate_plan_s(specs: dict[str, ModelSpec], configs: list[Config], policy: RepPolicy,
                    gpu: GpuSpec, params: CostModelParams) -> float:
    """Total planning estimate in seconds, including building each model once: random weights
    and the KV cache written at the GPU's bandwidth, plus a few seconds of allocation."""
    total = 0.0
    for c in configs:
        spec = specs[c.model]
        total += estimate_config_s(spec, c, policy, estimate_step_ms(spec, c, gpu, params))
    for model in dict.fromkeys(c.model for c in configs):
        total += 2.0 + 2 * specs[model].weight_bytes / gpu.memory_bandwidth_bytes_per_s
    return total
