"""Step-time models: how long one forward pass of the target or the draft takes.

The engine loop (src/serving.py) never computes a time itself; it asks a cost model, through the
two methods of `CostModel`, for the time of

* one target pass over `positions_per_seq` positions of every active sequence
  (greedy decode: 1 position; verification of gamma drafts: gamma + 1 positions), and
* `gamma` sequential one-position draft passes over the same sequences.

Both are vectorised over independent replications: `active` is a bool array [R, B] (replication,
slot), `context_len_tokens` an int array [R, B] of each slot's current context (prompt plus tokens
generated so far; meaningless where the slot is inactive), and the result is a float array [R] of
times, one per replication. A replication with no active sequence gets time 0. `positions_per_seq`
and `gamma` are an int or an int array [R] (one value per replication: the sweep runs several
gammas side by side as blocks of rows), so implementations must broadcast them.

`FlatCostModel` is the reference study's idealisation (Leviathan et al. 2023, section 3.4): a target
pass costs 1 time unit whatever the batch and however many positions it verifies; a draft pass costs
c target passes. A hardware-aware model plugs in by implementing the same two methods.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class CostModel(Protocol):
    """What the engine needs of a step-time model. See the module docstring for shapes."""

    time_unit: str  # unit of the returned times, e.g. "target_pass" or "ms"

    def target_pass_time(
        self, active: np.ndarray, positions_per_seq: int, context_len_tokens: np.ndarray
    ) -> np.ndarray: ...

    def draft_passes_time(
        self, active: np.ndarray, gamma: int, context_len_tokens: np.ndarray
    ) -> np.ndarray: ...


@dataclass(frozen=True)
class FlatCostModel:
    """Batch- and length-independent step costs (the seed study's idealisation).

    target pass = 1 time unit; draft pass = draft_cost_ratio time units, so a speculative step costs
    1 + gamma * c and the batch-1 walltime improvement is (1 - a^(g+1)) / ((1 - a)(g c + 1))
    (Leviathan et al. 2023, Theorem 3.8). Holds while every pass is memory-bound and the fixed
    per-step costs dominate; src/costmodel docs in design.md say where it breaks.
    """

    draft_cost_ratio: float = 0.2  # c: one draft pass / one target pass (seed study default)
    time_unit: str = "target_pass"

    def target_pass_time(self, active, positions_per_seq, context_len_tokens):
        return active.any(axis=1).astype(np.float64)

    def draft_passes_time(self, active, gamma, context_len_tokens):
        return active.any(axis=1) * (gamma * self.draft_cost_ratio)


# =================================================================================================
# Hardware-aware cost model (issue 3)
#
# A physical forward-pass time model of a Llama-style dense decoder on one GPU type at a
# tensor-parallel (TP) degree, vectorised over replications. See design.md ("Hardware cost model")
# for every formula, parameter, default and origin. Overview of one pass over S sequences x t
# positions (T = S t tokens), per GPU, all times in seconds internally:
#
#   pass = layers_non_attention + attention + lm_head + communication + overhead
#
#   layers_non_attention = L * [ sum_g pnorm(mem_g, comp_g) + elementwise_bytes(T) / bw_eff
#                                + KERNELS_PER_LAYER_NON_ATTENTION * kernel_fixed(gpu) ]
#       g over the layer's GEMMs (QKV, O, gate/up, down), each split by TP;
#       mem_g = 2 (K N + T K + T N) / bw_eff, comp_g = 2 T K N / flops_eff,
#       pnorm(a, b) = (a^p + b^p)^(1/p)  (smooth roofline: p -> inf gives max(a, b)).
#       This is exactly the quantity vidur's `forward_ms_non_attention` measures.
#   attention = L * [ pnorm(kv_bytes_read + kv_bytes_written + q/o bytes) / bw_eff,
#                           4 (H/TP) d sum_s sum_{i=1..t} (ctx_s + i) / flops_eff)
#                     + ATTENTION_KERNELS_PER_LAYER * kernel_fixed(gpu) ]
#   kernel_fixed(gpu) = GpuSpec.kernel_fixed_us where fitted (A100, H100), else the shared
#                       CostModelParams.kernel_fixed_us
#   lm_head = pnorm over the (vocab/TP x hidden) GEMM + final RMSNorm + its kernels
#   communication = 2 L all-reduces of T x hidden x 2 bytes (0 at TP 1)
#   overhead = engine overhead (EngineProfile, src/presets/engines.toml): per-step CPU time
#              (scheduling, input preparation, sampling, output processing) and the
#              speculation-specific costs; reported apart from the physics by
#              HardwareCostModel.target_pass_parts / draft_passes_parts / step_breakdown
# =================================================================================================

import math
import tomllib
from dataclasses import MISSING, field, fields, replace
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
BUILTIN_PRESET_FILES = (
    PRESETS_DIR / "gpus.toml",
    PRESETS_DIR / "models.toml",
    PRESETS_DIR / "costmodel_params.toml",
)
BYTES_PER_VALUE = 2  # BF16 weights, activations and KV cache
# Kernels in one decoder layer outside attention, as vidur profiles them: input RMSNorm, QKV
# projection, rotary embedding, output projection, post-attention RMSNorm, gate/up projection,
# SiLU-and-multiply, down projection, two residual adds.
KERNELS_PER_LAYER_NON_ATTENTION = 10
ATTENTION_KERNELS_PER_LAYER = 2  # KV-cache write (reshape_and_cache) + the attention kernel
LM_HEAD_KERNELS = 2  # final RMSNorm + LM-head GEMM


class CostModelInputError(ValueError):
    """A bad input to the hardware cost model: one line naming the field and what is allowed."""


# ------------------------------------------------------------------------------------------------
# Presets: GPUs, models, fitted parameters
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU (see src/presets/gpus.toml)."""

    gpu_id: str  # short id, e.g. "h100-sxm"
    name: str  # human-readable name
    dense_bf16_tflops: float  # dense BF16 tensor-core peak, TFLOP/s (no 2:4 sparsity)
    memory_bandwidth_gb_per_s: float  # peak DRAM bandwidth, GB/s (1e9 B/s)
    memory_gb: float  # DRAM capacity, GB (1e9 bytes)
    interconnect_bidirectional_gb_per_s: float  # GPU-GPU link per GPU, both directions, GB/s
    interconnect: str  # what the link is
    source: str  # datasheet citation
    # fixed time per GPU kernel on this GPU (launch gap, prologue/epilogue, tail), microseconds;
    # fitted per GPU where vidur has measurements (scripts/fit_costmodel.py writes it to
    # src/presets/costmodel_params.toml); None = CostModelParams.kernel_fixed_us (the shared value
    # fitted on all GPUs' rows), used for every GPU without measurements
    kernel_fixed_us: float | None = None

    @property
    def flops_per_s(self) -> float:
        return self.dense_bf16_tflops * 1e12

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * 1e9

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a Llama-style decoder (see src/presets/models.toml). BF16 throughout."""

    model_id: str  # short id, e.g. "llama-3.1-8b"
    hf_name: str  # Hugging Face repository
    n_layers: int  # decoder layers
    hidden_size: int  # model width h
    n_heads: int  # query heads H
    n_kv_heads: int  # key/value heads (GQA)
    head_dim: int  # d
    intermediate_size: int  # SwiGLU width I
    vocab_size: int  # V
    tied_embeddings: bool  # LM head shares the embedding matrix
    qkv_bias: bool  # biases on Q, K, V
    source: str  # config.json citation

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer: QKV (+bias), O, gate/up/down, two RMSNorm weights."""
        h, q, kv, inter = self.hidden_size, self.q_width, self.kv_width, self.intermediate_size
        qkv = h * (q + 2 * kv) + (q + 2 * kv if self.qkv_bias else 0)
        return qkv + q * h + 3 * h * inter + 2 * h

    @property
    def total_params(self) -> int:
        """All parameters: layers + embedding + final norm + LM head (once if tied)."""
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else embed
        return self.n_layers * self.layer_params + embed + head + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        return self.total_params * BYTES_PER_VALUE

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache per token, all layers: 2 (K and V) x layers x KV heads x head dim x 2 bytes."""
        return 2 * self.n_layers * self.kv_width * BYTES_PER_VALUE


@dataclass(frozen=True)
class CostModelParams:
    """Every efficiency factor and fixed cost of the hardware model.

    Defaults are the values scripts/fit_costmodel.py fitted to vidur's measurements (A100 and H100,
    Llama-2-7B and Llama-3-8B, TP 1-8, 1-4096 tokens); src/presets/costmodel_params.toml holds the
    latest fit and overrides these when loaded through `load_presets`. One shared set for all GPUs
    and models: they are fractions of datasheet peaks and per-kernel times, not per-model fits.
    The one GPU-level exception is the kernel fixed time: GPUs with measurements carry their own
    fitted GpuSpec.kernel_fixed_us; kernel_fixed_us here is the shared value for all others.
    """

    # fraction of datasheet peak DRAM bandwidth that weight/activation/KV streaming reaches (fit)
    memory_bandwidth_efficiency_fraction: float = 0.8459
    # fraction of dense BF16 peak FLOP/s that large GEMMs and attention reach (fit)
    compute_efficiency_fraction: float = 0.7216
    # exponent p of the smooth roofline (t_mem^p + t_comp^p)^(1/p); larger = sharper knee (fit)
    roofline_sharpness_p: float = 1.450
    # fixed time per GPU kernel (launch gap, prologue/epilogue, tail) in microseconds, for GPUs
    # without their own GpuSpec.kernel_fixed_us (fit: shared value over all GPUs' rows)
    kernel_fixed_us: float = 3.423
    # all-reduce latency for GPUs without measured all-reduce data, microseconds (fit on H100 DGX)
    allreduce_latency_us: float = 29.5
    # achieved fraction of the one-direction interconnect bandwidth in an all-reduce, for GPUs
    # without measured all-reduce data (fit on H100 DGX, bus-bandwidth convention of nccl-tests)
    allreduce_link_efficiency_fraction: float = 0.782
    # CPU time per target step independent of batch: scheduling, input preparation, sampler,
    # launch, output processing (intercept of vidur's A100 CPU profiles, Llama-2-7B TP1), ms
    step_cpu_fixed_ms: float = 0.862
    # CPU time per target step per active sequence (slope of the same profiles), ms
    step_cpu_per_seq_ms: float = 0.0426
    # CPU time per draft-model or EAGLE pass independent of batch: launch + sampler
    # (intercept of vidur's sampler_e2e + model_execution_launch medians), ms
    draft_pass_cpu_fixed_ms: float = 0.525
    # CPU time per draft pass per active sequence (slope of the same), ms
    draft_pass_cpu_per_seq_ms: float = 0.00536
    # CPU time of one prompt-lookup / n-gram drafting pass (string matching on the host), ms;
    # a prior (vLLM's n-gram proposer is a numpy search of tens of microseconds), not measured
    ngram_pass_cpu_ms: float = 0.05
    # fraction of GPU memory kept free for activations, CUDA graphs, allocator fragmentation and
    # the runtime (vLLM's default gpu_memory_utilization = 0.9 leaves 10%)
    memory_reserve_fraction: float = 0.10


@dataclass(frozen=True)
class AllReduceFit:
    """Measured all-reduce cost on one system: time = latency + 2(n-1)/n x bytes / bus bandwidth."""

    gpu_id: str  # GPU preset the measurement belongs to
    n_gpus: int  # GPUs taking part (= TP degree)
    latency_us: float  # fitted fixed time, microseconds
    bus_bandwidth_gb_per_s: float  # fitted bus bandwidth (nccl-tests convention), GB/s


@dataclass(frozen=True)
class Presets:
    """Everything the hardware model reads from data files."""

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    params: CostModelParams
    allreduce: tuple[AllReduceFit, ...]

    def gpu(self, gpu_id: str, field_name: str = "gpu") -> GpuSpec:
        if gpu_id not in self.gpus:
            raise CostModelInputError(
                f"{field_name}: unknown GPU '{gpu_id}'; known: {', '.join(sorted(self.gpus))}")
        return self.gpus[gpu_id]

    def model(self, model_id: str, field_name: str = "model") -> ModelSpec:
        if model_id not in self.models:
            raise CostModelInputError(
                f"{field_name}: unknown model '{model_id}'; known: {', '.join(sorted(self.models))}")
        return self.models[model_id]


def _coerce_fields(cls, table_name: str, entry_id: str, raw: Mapping, partial: bool) -> dict:
    """Check and convert one TOML table to the keyword arguments of `cls` (minus the id field)."""
    id_field = {GpuSpec: "gpu_id", ModelSpec: "model_id"}.get(cls)
    wanted = {f.name: f for f in fields(cls) if f.name != id_field}
    unknown = sorted(set(raw) - set(wanted))
    if unknown:
        raise CostModelInputError(
            f"{table_name}.{entry_id}: unknown field(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(wanted)}")
    if not partial:
        required = [name for name, f in wanted.items() if f.default is MISSING]
        missing = [name for name in required if name not in raw]
        if missing:
            raise CostModelInputError(
                f"{table_name}.{entry_id}: missing field(s) {', '.join(missing)}; "
                f"required: {', '.join(required)}")
    out = {}
    for name, value in raw.items():
        kind = wanted[name].type
        kind = kind if isinstance(kind, str) else kind.__name__
        kind = kind.removesuffix(" | None")  # optional fields: a TOML value is never None
        try:
            if kind == "bool":
                if not isinstance(value, bool):
                    raise TypeError
                out[name] = value
            elif kind == "int":
                if isinstance(value, bool) or int(value) != value:
                    raise TypeError
                out[name] = int(value)
            elif kind == "float":
                if isinstance(value, bool):
                    raise TypeError
                out[name] = float(value)
            else:
                out[name] = str(value)
        except (TypeError, ValueError):
            raise CostModelInputError(
                f"{table_name}.{entry_id}.{name}: expected {kind}, got {value!r}") from None
    return out


def _check_positive_fields(table_name: str, entry_id: str, values: Mapping) -> None:
    for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
            if name.endswith("_fraction") or name.endswith("_ms") or name.endswith("_us"):
                if value < 0:
                    raise CostModelInputError(
                        f"{table_name}.{entry_id}.{name}: must be >= 0, got {value}")
                continue
            raise CostModelInputError(f"{table_name}.{entry_id}.{name}: must be > 0, got {value}")


def load_presets(extra_paths: Iterable[str | Path] = ()) -> Presets:
    """Built-in presets with each file of `extra_paths` merged over them, in order.

    A preset file may hold any of: [gpus.<id>] (GpuSpec fields), [models.<id>] (ModelSpec fields),
    [params] (CostModelParams fields) and [allreduce.<gpu id>] with keys = GPU count and values
    {latency_us, bus_bandwidth_gb_per_s}. An id that already exists is updated field by field; a
    new id must give every field.
    """
    gpus: dict[str, dict] = {}
    models: dict[str, dict] = {}
    params: dict = {}
    allreduce: dict[tuple[str, int], AllReduceFit] = {}
    for path in (*BUILTIN_PRESET_FILES, *map(Path, extra_paths)):
        if not path.is_file():
            if path in BUILTIN_PRESET_FILES:
                continue
            raise CostModelInputError(f"presets: file not found: {path}")
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except tomllib.TOMLDecodeError as exc:
            raise CostModelInputError(f"presets: {path} is not valid TOML ({exc})") from None
        except (OSError, UnicodeDecodeError):
            raise CostModelInputError(f"presets: cannot read {path} as a TOML text file") from None
        unknown = sorted(set(data) - {"gpus", "models", "params", "allreduce"})
        if unknown:
            raise CostModelInputError(
                f"presets: {path} has unknown table(s) {', '.join(unknown)}; "
                "allowed: gpus, models, params, allreduce")
        for table_name, cls, store in (("gpus", GpuSpec, gpus), ("models", ModelSpec, models)):
            for entry_id, raw in data.get(table_name, {}).items():
                if not isinstance(raw, dict):
                    raise CostModelInputError(f"{table_name}.{entry_id}: must be a table")
                values = _coerce_fields(cls, table_name, entry_id, raw, partial=entry_id in store)
                _check_positive_fields(table_name, entry_id, values)
                store[entry_id] = {**store.get(entry_id, {}), **values}
        if "params" in data:
            values = _coerce_fields(CostModelParams, "params", "", data["params"], partial=True)
            _check_positive_fields("params", "", values)
            params.update(values)
        for gpu_id, per_n in data.get("allreduce", {}).items():
            for n_text, raw in per_n.items():
                try:
                    n_gpus = int(n_text)
                    fit = AllReduceFit(gpu_id, n_gpus, float(raw["latency_us"]),
                                       float(raw["bus_bandwidth_gb_per_s"]))
                except (KeyError, TypeError, ValueError):
                    raise CostModelInputError(
                        f"allreduce.{gpu_id}.{n_text}: expected a GPU count key with "
                        "{latency_us, bus_bandwidth_gb_per_s}") from None
                allreduce[(gpu_id, n_gpus)] = fit
    return Presets(
        gpus={k: GpuSpec(gpu_id=k, **v) for k, v in gpus.items()},
        models={k: ModelSpec(model_id=k, **v) for k, v in models.items()},
        params=replace(CostModelParams(), **params),
        allreduce=tuple(allreduce.values()),
    )


# ------------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------------
def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise CostModelInputError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_tp(model: ModelSpec, tp: int, field_name: str = "tp") -> int:
    """TP must divide the query heads and the KV heads (no KV-head replication is modelled)."""
    tp = _check_int(field_name, tp, 1)
    if model.n_heads % tp or model.n_kv_heads % tp:
        allowed = [d for d in range(1, model.n_kv_heads + 1)
                   if model.n_kv_heads % d == 0 and model.n_heads % d == 0]
        failing = " and ".join(f"{name}={n}" for name, n in (("n_heads", model.n_heads), ("n_kv_heads", model.n_kv_heads))
                               if n % tp)
        raise CostModelInputError(
            f"{field_name}: {tp} does not divide {failing} of {model.model_id}; allowed: "
            f"{', '.join(map(str, allowed))}")
    return tp


# ------------------------------------------------------------------------------------------------
# Per-pass coefficients: everything that does not depend on the batch, precomputed once
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PassCoefficients:
    """Time coefficients (seconds) of one pass of one network on one GPU at one TP degree.

    GEMM arrays have one entry per GEMM kind; row 0..n_layer_gemms-1 belong to the decoder layers
    (times n_layers), the rest to the LM head / extra projections (once per pass).
    """

    gemm_weight_s: np.ndarray  # [G] weight bytes / (bw x eff), x count
    gemm_mem_per_token_s: np.ndarray  # [G] activation in+out bytes per token / (bw x eff), x count
    gemm_compute_per_token_s: np.ndarray  # [G] 2 K N / (flops x eff), x count
    gemm_selector: np.ndarray  # [2, G] 1 where a GEMM belongs to (layers, lm_head)
    layer_elementwise_per_token_s: float  # norms, residuals, rotary, activation, all layers
    layer_fixed_s: float  # kernel fixed time of all non-attention layer kernels
    attn_read_per_ctx_token_s: float  # KV bytes read per cached token, all layers
    attn_per_new_token_s: float  # KV write + Q read + O write per new token, all layers
    attn_compute_per_pair_s: float  # 4 (H/TP) d per (query, key) pair, all layers
    attn_fixed_s: float  # attention kernels' fixed time, all layers
    head_elementwise_per_token_s: float  # final RMSNorm
    head_fixed_s: float  # LM-head kernels' fixed time
    comm_fixed_s: float  # all-reduce latency x all-reduces per pass
    comm_per_token_s: float  # all-reduce bandwidth term per token
    overhead_fixed_s: float  # CPU time per pass
    overhead_per_seq_s: float  # CPU time per pass per sequence
    sharpness_p: float  # roofline p


def allreduce_time_s(gpu: GpuSpec, n_gpus: int, message_bytes, params: CostModelParams,
                     allreduce: Sequence[AllReduceFit] = ()):
    """All-reduce time: latency + 2 (n-1)/n x bytes / bus_bandwidth; 0 for one GPU.

    Uses the measured fit for (gpu, n) when there is one, else the generic model with
    latency = params.allreduce_latency_us and bus bandwidth =
    params.allreduce_link_efficiency_fraction x interconnect_bidirectional / 2.
    """
    latency_s, bus_bytes_per_s = allreduce_coefficients(gpu, n_gpus, params, allreduce)
    if n_gpus == 1:
        return 0.0 * np.asarray(message_bytes, dtype=float)
    return latency_s + 2 * (n_gpus - 1) / n_gpus * np.asarray(message_bytes, float) / bus_bytes_per_s


def allreduce_coefficients(gpu: GpuSpec, n_gpus: int, params: CostModelParams,
                           allreduce: Sequence[AllReduceFit] = ()) -> tuple[float, float]:
    """(latency_s, bus_bandwidth_bytes_per_s) for an all-reduce over n_gpus GPUs of this type."""
    for fit in allreduce:
        if fit.gpu_id == gpu.gpu_id and fit.n_gpus == n_gpus:
            return fit.latency_us * 1e-6, fit.bus_bandwidth_gb_per_s * 1e9
    return (params.allreduce_latency_us * 1e-6,
            params.allreduce_link_efficiency_fraction * gpu.interconnect_bidirectional_gb_per_s
            * 1e9 / 2)


def kernel_fixed_s(gpu: GpuSpec, params: CostModelParams) -> float:
    """Fixed time of one kernel on this GPU, seconds: the GPU's own fitted kernel_fixed_us where
    it has one (GPUs with measurements), else the shared params.kernel_fixed_us."""
    us = gpu.kernel_fixed_us
    return (params.kernel_fixed_us if us is None else us) * 1e-6


def pass_coefficients(
    gpu: GpuSpec,
    model: ModelSpec,
    tp: int,
    params: CostModelParams,
    allreduce: Sequence[AllReduceFit] = (),
    *,
    n_layers: int | None = None,
    extra_gemms: Sequence[tuple[int, int]] = (),
    overhead_fixed_ms: float = 0.0,
    overhead_per_seq_ms: float = 0.0,
) -> PassCoefficients:
    """Precompute the batch-independent coefficients of one pass (see the section header).

    n_layers overrides the model's layer count (an EAGLE head runs 1 layer of the target's shape);
    extra_gemms are (K, N) projections run once per pass, unsplit by TP (EAGLE's 2h -> h fc).
    """
    L = model.n_layers if n_layers is None else n_layers
    bw = gpu.memory_bandwidth_bytes_per_s * params.memory_bandwidth_efficiency_fraction
    fl = gpu.flops_per_s * params.compute_efficiency_fraction
    kfix = kernel_fixed_s(gpu, params)
    h, q, kv, inter = model.hidden_size, model.q_width, model.kv_width, model.intermediate_size
    B = BYTES_PER_VALUE
    layer_gemms = [(h, (q + 2 * kv) / tp), (q / tp, h), (h, 2 * inter / tp), (inter / tp, h)]
    head_gemms = [(h, model.vocab_size / tp)] + [(k, n) for k, n in extra_gemms]
    K = np.array([k for k, _ in layer_gemms + head_gemms], dtype=float)
    N = np.array([n for _, n in layer_gemms + head_gemms], dtype=float)
    count = np.array([L] * len(layer_gemms) + [1] * len(head_gemms), dtype=float)
    selector = np.zeros((2, len(K)))
    selector[0, : len(layer_gemms)] = 1.0
    selector[1, len(layer_gemms):] = 1.0
    # Elementwise bytes per token per layer: 2 RMSNorms (read + write h), 2 residual adds
    # (2 reads + 1 write of h) - replicated on every TP rank -, rotary on q and k (read + write),
    # SiLU-and-multiply (read gate and up, write one) - split by TP.
    elementwise_values = 4 * h + 6 * h + 2 * (q + kv) / tp + 3 * inter / tp
    n_allreduce = 2 * L if tp > 1 else 0
    ar_latency_s, ar_bus_bytes_per_s = allreduce_coefficients(gpu, tp, params, allreduce)
    return PassCoefficients(
        gemm_weight_s=count * K * N * B / bw,
        gemm_mem_per_token_s=count * (K + N) * B / bw,
        gemm_compute_per_token_s=count * 2 * K * N / fl,
        gemm_selector=selector,
        layer_elementwise_per_token_s=L * elementwise_values * B / bw,
        layer_fixed_s=L * KERNELS_PER_LAYER_NON_ATTENTION * kfix,
        attn_read_per_ctx_token_s=L * 2 * kv / tp * B / bw,
        attn_per_new_token_s=L * (2 * kv / tp + 2 * q / tp) * B / bw,
        attn_compute_per_pair_s=L * 4 * q / tp / fl,
        attn_fixed_s=L * ATTENTION_KERNELS_PER_LAYER * kfix,
        head_elementwise_per_token_s=2 * h * B / bw,
        head_fixed_s=(LM_HEAD_KERNELS + len(extra_gemms)) * kfix,
        comm_fixed_s=n_allreduce * ar_latency_s,
        comm_per_token_s=(n_allreduce * 2 * (tp - 1) / tp * h * B / ar_bus_bytes_per_s
                          if tp > 1 else 0.0),
        overhead_fixed_s=overhead_fixed_ms * 1e-3,
        overhead_per_seq_s=overhead_per_seq_ms * 1e-3,
        sharpness_p=params.roofline_sharpness_p,
    )


def _pnorm(a, b, p):
    """Smooth roofline (a^p + b^p)^(1/p) of a memory time a > 0 and a compute time b >= 0."""
    return (a**p + b**p) ** (1.0 / p)


def attention_terms_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens):
    """(memory_s, compute_s) of the attention kernels of one pass.

    Sequence i's new position j (1-based) attends to ctx_i + j keys, so the FLOPs go with
    sum_i sum_j (ctx_i + j) = t C + S t (t + 1) / 2 and the KV bytes read with C + S t
    (C = sum of contexts before the pass, S = sequences, t = positions per sequence).
    """
    T = n_seqs * positions_per_seq
    memory_s = c.attn_read_per_ctx_token_s * (sum_context_tokens + T) + c.attn_per_new_token_s * T
    compute_s = c.attn_compute_per_pair_s * (
        positions_per_seq * sum_context_tokens + n_seqs * (positions_per_seq * (positions_per_seq + 1) / 2))
    return memory_s, compute_s


def pass_components_s(c: PassCoefficients, n_seqs, positions_per_seq, sum_context_tokens):
    """Time components (seconds) of one pass over n_seqs sequences x positions_per_seq positions.

    n_seqs, positions_per_seq and sum_context_tokens (sum over the sequences of the context before
    the pass) broadcast together (any shape); returns a dict of arrays of that shape:
    layers_non_attention, attention, lm_head, communication, overhead, compute, memory (the last
    two: summed roofline terms, for telling which bound dominates).
    """
    S, t, C = np.broadcast_arrays(np.asarray(n_seqs, dtype=float),
                                  np.asarray(positions_per_seq, dtype=float),
                                  np.asarray(sum_context_tokens, dtype=float))
    T = S * t
    p = c.sharpness_p
    shape_g = (-1,) + (1,) * T.ndim
    mem_g = c.gemm_weight_s.reshape(shape_g) + c.gemm_mem_per_token_s.reshape(shape_g) * T
    comp_g = c.gemm_compute_per_token_s.reshape(shape_g) * T
    gemm = np.tensordot(c.gemm_selector, _pnorm(mem_g, comp_g, p), axes=1)  # [2, ...]
    attn_mem, attn_comp = attention_terms_s(c, S, t, C)
    return {
        "layers_non_attention": gemm[0] + c.layer_elementwise_per_token_s * T + c.layer_fixed_s,
        "attention": _pnorm(attn_mem, attn_comp, p) + c.attn_fixed_s,
        "lm_head": gemm[1] + c.head_elementwise_per_token_s * T + c.head_fixed_s,
        "communication": c.comm_fixed_s + c.comm_per_token_s * T,
        "overhead": c.overhead_fixed_s + c.overhead_per_seq_s * S,
        "compute": (c.gemm_selector @ comp_g.reshape(len(c.gemm_weight_s), -1)).sum(axis=0)
        .reshape(T.shape) + attn_comp,
        "memory": (c.gemm_selector @ mem_g.reshape(len(c.gemm_weight_s), -1)).sum(axis=0)
        .reshape(T.shape) + attn_mem,
    }


def pass_time_table_ms(c: PassCoefficients, max_seqs: int, max_positions: int) -> np.ndarray:
    """[max_seqs + 1, max_positions + 1] table of the attention-free part of a pass, ms.

    Entry [S, t] = layers_non_attention + lm_head + communication + overhead for S sequences x t
    positions: all of a pass but attention depends only on (S, t), so the engine path looks it up
    instead of recomputing it every step.
    """
    S, t = np.meshgrid(np.arange(max_seqs + 1), np.arange(max_positions + 1), indexing="ij")
    comp = pass_components_s(c, S, t, np.zeros(S.shape))
    return (comp["layers_non_attention"] + comp["lm_head"] + comp["communication"]
            + comp["overhead"]) * 1e3


def non_attention_forward_ms(gpu: GpuSpec, model: ModelSpec, tp: int, num_tokens,
                             params: CostModelParams) -> np.ndarray:
    """The quantity vidur's `forward_ms_non_attention` measures, in ms, for each num_tokens:
    all decoder layers without the attention kernel, LM head, communication or CPU work."""
    c = pass_coefficients(gpu, model, tp, params)
    tokens = np.asarray(num_tokens, dtype=float)
    return pass_components_s(c, tokens, 1, np.zeros_like(tokens))["layers_non_attention"] * 1e3


# ------------------------------------------------------------------------------------------------
# Memory fit
# ------------------------------------------------------------------------------------------------
def memory_needed_bytes(weight_bytes_per_gpu: float, kv_bytes_per_token_per_gpu: float,
                        kv_tokens) -> np.ndarray:
    """Per-GPU memory: weights / TP + KV cache of every cached token / TP (before the reserve)."""
    return weight_bytes_per_gpu + kv_bytes_per_token_per_gpu * np.asarray(kv_tokens, float)


def memory_usable_bytes(gpu: GpuSpec, params: CostModelParams) -> float:
    return gpu.memory_bytes * (1.0 - params.memory_reserve_fraction)


def _raise_does_not_fit(gpu, params, what, need_bytes, weight_bytes, kv_tokens):
    usable = memory_usable_bytes(gpu, params)
    if weight_bytes > usable:  # no batch or context can fit: the weights alone are too large
        raise CostModelInputError(
            f"tp: {what} has {weight_bytes / 1e9:.1f} GB of weights per GPU but {gpu.gpu_id} has "
            f"{usable / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus {params.memory_reserve_fraction:.0%} "
            "reserve); allowed: a larger tp")
    raise CostModelInputError(
        f"batch/context: {what} needs {need_bytes / 1e9:.1f} GB per GPU (weights "
        f"{weight_bytes / 1e9:.1f} GB + KV cache of {int(kv_tokens)} tokens "
        f"{(need_bytes - weight_bytes) / 1e9:.1f} GB) but {gpu.gpu_id} has "
        f"{memory_usable_bytes(gpu, params) / 1e9:.1f} GB usable ({gpu.memory_gb:g} GB minus "
        f"{params.memory_reserve_fraction:.0%} reserve); allowed: a larger tp, a smaller batch "
        "or a shorter context")


# ------------------------------------------------------------------------------------------------
# Engine overhead profiles (issue 5): what a serving engine spends beyond the GPU physics
# ------------------------------------------------------------------------------------------------
ENGINE_PROFILES_FILE = PRESETS_DIR / "engines.toml"
LEGACY_ENGINE_NAME = "params"  # the profile made from CostModelParams' CPU fields (issue 3 default)


@dataclass(frozen=True)
class EngineProfile:
    """Overheads of one serving engine on top of the GPU physics (src/presets/engines.toml).

    For S active sequences, C = sum of their contexts, t positions per sequence, gamma drafts:

        target pass (greedy decode, t = 1, or verification, t = gamma + 1):
            overhead = step_cpu_fixed_ms + step_cpu_per_seq_ms S
                       + [t > 1] ( (rejection_sampling_per_position_ms t + kv_bookkeeping_per_seq_ms) S
                                   + [scoring_batch_expansion] step_cpu_per_seq_ms S (t - 1)
                                   + verification_attention_slowdown_factor attn' - attn(S, t, C) )
            attn' = attn(S, t, C), or with scoring_batch_expansion the attention of S t
            one-position sequences, sequence (i, j) reading ctx_i + j - 1 cached tokens:
            attn(S t, 1, t C + S t (t - 1) / 2)
        gamma draft-model / EAGLE / self-speculation passes:
            overhead = gamma (draft_pass_cpu_fixed_ms + draft_pass_cpu_per_seq_ms S)
                       + [e > 0] ( pass(S, 1 + e, C) - pass(S, 1, C) ),  e = draft_catchup_positions_per_seq
        gamma n-gram passes:  overhead = gamma ngram_pass_cpu_ms

    attn(S, t, C) is the GPU-physics attention time of the pass and pass(S, t, C) the draft's
    whole GPU-physics pass time: the catch-up pass (the draft re-reading the tokens committed in
    the previous step that its KV cache lacks) is GPU work, but work an ideal engine avoids, so it
    is reported as engine overhead. Every term is 0 where S = 0. The `ideal` profile has every
    term 0 and factor 1: the GPU-physics bound.
    """

    name: str  # profile id, e.g. "ideal" or "vllm-2024"
    description: str  # one line: which engine and version the numbers stand for
    step_cpu_fixed_ms: float  # CPU per target pass independent of batch (schedule, prepare, sample, launch, outputs), ms
    step_cpu_per_seq_ms: float  # CPU per target pass per active sequence, ms
    draft_pass_cpu_fixed_ms: float  # CPU per draft-model / EAGLE pass independent of batch (launch + sampler), ms
    draft_pass_cpu_per_seq_ms: float  # CPU per draft pass per active sequence, ms
    ngram_pass_cpu_ms: float  # CPU of one prompt-lookup (n-gram) proposal pass, ms
    rejection_sampling_per_position_ms: float  # rejection sampler per verified position (gamma + 1 per sequence), ms
    kv_bookkeeping_per_seq_ms: float  # KV slots for gamma+1 positions + rollback of rejected ones, per sequence per step, ms
    draft_catchup_positions_per_seq: int  # extra positions in the first draft pass of a step (draft re-reads committed tokens)
    verification_attention_slowdown_factor: float  # attention time of a verification pass / that of a decode-style kernel (>= 1)
    scoring_batch_expansion: bool = False  # verification run as S (gamma+1) one-position sequences: per-seq step CPU and KV reads paid per position

    @property
    def is_ideal(self) -> bool:
        """True when every overhead term is zero (the GPU-physics bound)."""
        return (self.step_cpu_fixed_ms == self.step_cpu_per_seq_ms == self.draft_pass_cpu_fixed_ms
                == self.draft_pass_cpu_per_seq_ms == self.ngram_pass_cpu_ms
                == self.rejection_sampling_per_position_ms == self.kv_bookkeeping_per_seq_ms == 0.0
                and self.draft_catchup_positions_per_seq == 0 and not self.scoring_batch_expansion
                and self.verification_attention_slowdown_factor == 1.0)

    @classmethod
    def from_params(cls, params: CostModelParams) -> "EngineProfile":
        """The issue-3 default: CostModelParams' per-pass CPU figures, no speculation extras."""
        return cls(
            name=LEGACY_ENGINE_NAME,
            description="CPU figures of CostModelParams (vidur A100, Llama-2-7B TP1); no "
                        "speculation-specific overheads",
            step_cpu_fixed_ms=params.step_cpu_fixed_ms,
            step_cpu_per_seq_ms=params.step_cpu_per_seq_ms,
            draft_pass_cpu_fixed_ms=params.draft_pass_cpu_fixed_ms,
            draft_pass_cpu_per_seq_ms=params.draft_pass_cpu_per_seq_ms,
            ngram_pass_cpu_ms=params.ngram_pass_cpu_ms,
            rejection_sampling_per_position_ms=0.0,
            kv_bookkeeping_per_seq_ms=0.0,
            draft_catchup_positions_per_seq=0,
            verification_attention_slowdown_factor=1.0,
        )


IDEAL_ENGINE = EngineProfile(
    name="ideal", description="no CPU, launch or implementation overhead: the GPU-physics bound",
    step_cpu_fixed_ms=0.0, step_cpu_per_seq_ms=0.0, draft_pass_cpu_fixed_ms=0.0,
    draft_pass_cpu_per_seq_ms=0.0, ngram_pass_cpu_ms=0.0, rejection_sampling_per_position_ms=0.0,
    kv_bookkeeping_per_seq_ms=0.0, draft_catchup_positions_per_seq=0,
    verification_attention_slowdown_factor=1.0, scoring_batch_expansion=False)


def load_engine_profiles(path: str | Path = ENGINE_PROFILES_FILE) -> dict[str, EngineProfile]:
    """Engine profiles of a TOML file with one [engines.<name>] table per profile.

    Every EngineProfile field but `name` is required; unknown fields, wrong types, negative
    values, a fractional catch-up count or a slowdown factor below 1 raise CostModelInputError.
    """
    path = Path(path)
    if not path.is_file():
        raise CostModelInputError(f"engines: file not found: {path}")
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise CostModelInputError(f"engines: {path} is not valid TOML ({exc})") from None
    except (OSError, UnicodeDecodeError):
        raise CostModelInputError(f"engines: cannot read {path} as a TOML text file") from None
    unknown = sorted(set(data) - {"engines"})
    if unknown:
        raise CostModelInputError(
            f"engines: {path} has unknown table(s) {', '.join(unknown)}; allowed: engines")
    wanted = {f.name: f.type for f in fields(EngineProfile) if f.name != "name"}
    out = {}
    for name, raw in data.get("engines", {}).items():
        where = f"engines.{name}"
        if not isinstance(raw, dict):
            raise CostModelInputError(f"{where}: must be a table")
        extra = sorted(set(raw) - set(wanted))
        if extra:
            raise CostModelInputError(f"{where}: unknown field(s) {', '.join(extra)}; "
                                      f"allowed: {', '.join(wanted)}")
        missing = [k for k in wanted if k not in raw]
        if missing:
            raise CostModelInputError(f"{where}: missing field(s) {', '.join(missing)}")
        values = {}
        for key, kind in wanted.items():
            value = raw[key]
            kind = kind if isinstance(kind, str) else kind.__name__
            if kind == "bool":
                if not isinstance(value, bool):
                    raise CostModelInputError(f"{where}.{key}: expected true or false, got {value!r}")
            elif kind == "str":
                if not isinstance(value, str):
                    raise CostModelInputError(f"{where}.{key}: expected a string, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    kind == "int" and int(value) != value) or not math.isfinite(value):
                raise CostModelInputError(f"{where}.{key}: expected {kind}, got {value!r}")
            elif value < 0:
                raise CostModelInputError(f"{where}.{key}: must be >= 0, got {value}")
            values[key] = int(value) if kind == "int" else (float(value) if kind == "float"
                                                              else value)
        if values["verification_attention_slowdown_factor"] < 1.0:
            raise CostModelInputError(f"{where}.verification_attention_slowdown_factor: must be "
                                      f">= 1, got {values['verification_attention_slowdown_factor']}")
        out[name] = EngineProfile(name=name, **values)
    return out


def engine_profile(name: str, path: str | Path = ENGINE_PROFILES_FILE,
                   field_name: str = "engine") -> EngineProfile:
    """One profile by name; CostModelInputError naming `field_name` and the known ones if absent."""
    profiles = load_engine_profiles(path)
    if name not in profiles:
        raise CostModelInputError(f"{field_name}: unknown engine profile '{name}'; known: "
                                  f"{', '.join(sorted(profiles))}")
    return profiles[name]


# ------------------------------------------------------------------------------------------------
# Drafts and the engine-facing cost model
# ------------------------------------------------------------------------------------------------
DraftKind = Literal["model", "eagle", "ngram", "self"]
DRAFT_KINDS = ("model", "eagle", "ngram", "self")


@dataclass(frozen=True)
class DraftSpec:
    """How draft tokens are produced.

    kind "model": a stand-alone draft model (`model`) on `tp` GPUs (its own weights and KV cache;
    it shares GPU 0 with the target). kind "eagle": an EAGLE-style head - one decoder layer of the
    target's shape plus a 2h -> h fc, fed the target's hidden states, sharing the target's LM head,
    run at the target's TP. kind "ngram": prompt lookup on the host (engine's ngram_pass_cpu_ms
    per pass). kind "self": self-speculation (MagicDec, Chen et al. 2024): the target network
    itself at the target's TP, no extra weights, attending to a compressed KV cache of at most
    `kv_budget_tokens` tokens per sequence (StreamingLLM-style sink + window).

    kv_budget_tokens (kinds model, eagle, self; None = full context): each draft pass reads at
    most this many cached tokens per sequence, min(context, budget), and the draft keeps at most
    this many tokens of KV per sequence.
    """

    kind: str = "model"  # "model", "eagle", "ngram" or "self"
    model: ModelSpec | None = None  # the draft network for kinds "model" and "self"
    tp: int = 1  # TP degree of the draft network
    kv_budget_tokens: int | None = None  # cap on the draft's KV per sequence; None = no cap


@dataclass(frozen=True)
class StepBreakdown:
    """Times of one speculative step at a uniform batch (every sequence at the same context), ms,
    split into GPU physics and engine overhead (`HardwareCostModel.step_breakdown`)."""

    batch: int  # active sequences S
    gamma: int  # drafts per step
    context_len_tokens: int  # cached tokens per sequence before the step
    decode_physics_ms: float  # T_AR physics: one greedy target pass (1 position)
    decode_overhead_ms: float  # T_AR engine overhead
    verify_physics_ms: float  # T_V physics: one target pass over gamma + 1 positions
    verify_overhead_ms: float  # T_V engine overhead
    draft_physics_ms: float  # gamma x T_D physics: all gamma draft passes of the step
    draft_overhead_ms: float  # engine overhead of the gamma draft passes (CPU + catch-up)

    @property
    def decode_ms(self) -> float:
        return self.decode_physics_ms + self.decode_overhead_ms

    @property
    def verify_ms(self) -> float:
        return self.verify_physics_ms + self.verify_overhead_ms

    @property
    def draft_ms(self) -> float:
        return self.draft_physics_ms + self.draft_overhead_ms

    def speedup(self, tokens_per_step: float) -> float:
        """MagicDec's batched form: Omega T_AR / (gamma T_D + T_V), tokens_per_step = Omega."""
        return tokens_per_step * self.decode_ms / (self.draft_ms + self.verify_ms)


@dataclass(frozen=True)
class PassBreakdown:
    """Per-component time of one pass, ms."""

    tokens: int  # tokens in the pass (batch x positions)
    layers_non_attention_ms: float  # = vidur's forward_ms_non_attention
    attention_ms: float  # attention kernels incl. KV-cache write
    lm_head_ms: float  # final norm + LM head
    communication_ms: float  # TP all-reduces
    overhead_ms: float  # per-step CPU
    total_ms: float
    bound: str  # "memory" or "compute": the larger of the summed roofline terms


def forward_pass_breakdown(
    gpu: GpuSpec,
    model: ModelSpec,
    tp: int,
    batch: int,
    positions_per_seq: int,
    context_len_tokens: int,
    params: CostModelParams,
    allreduce: Sequence[AllReduceFit] = (),
    include_step_overhead: bool = True,
) -> PassBreakdown:
    """One target pass of `batch` sequences x `positions_per_seq` positions, each with
    `context_len_tokens` tokens already cached. Raises CostModelInputError when the inputs are bad
    or the weights plus the KV cache (batch x (context + positions)) do not fit in memory."""
    tp = check_tp(model, tp)
    batch = _check_int("batch", batch, 1)
    positions_per_seq = _check_int("positions", positions_per_seq, 1)
    context_len_tokens = _check_int("context", context_len_tokens, 0)
    kv_tokens = batch * (context_len_tokens + positions_per_seq)
    weight_bytes = model.weight_bytes / tp
    need = float(memory_needed_bytes(weight_bytes, model.kv_bytes_per_token / tp, kv_tokens))
    if need > memory_usable_bytes(gpu, params):
        _raise_does_not_fit(gpu, params, f"{model.model_id} at tp={tp}", need, weight_bytes,
                            kv_tokens)
    c = pass_coefficients(
        gpu, model, tp, params, allreduce,
        overhead_fixed_ms=params.step_cpu_fixed_ms if include_step_overhead else 0.0,
        overhead_per_seq_ms=params.step_cpu_per_seq_ms if include_step_overhead else 0.0,
    )
    comp = pass_components_s(c, np.array([batch]), positions_per_seq,
                             np.array([batch * context_len_tokens]))
    ms = {k: float(v[0]) * 1e3 for k, v in comp.items()}
    parts = ("layers_non_attention", "attention", "lm_head", "communication", "overhead")
    return PassBreakdown(
        tokens=batch * positions_per_seq,
        layers_non_attention_ms=ms["layers_non_attention"],
        attention_ms=ms["attention"],
        lm_head_ms=ms["lm_head"],
        communication_ms=ms["communication"],
        overhead_ms=ms["overhead"],
        total_ms=sum(ms[k] for k in parts),
        bound="compute" if ms["compute"] > ms["memory"] else "memory",
    )


@dataclass(frozen=True)
class HardwareCostModel:
    """Step times in ms from the physical model plus an engine profile (implements `CostModel`).

    target_pass_time: one target pass over positions_per_seq positions of every active sequence.
    draft_passes_time: gamma sequential one-position draft passes; pass k (0-based) sees every
    context grown by k (capped at the draft's KV budget). Each is physics + engine overhead;
    `target_pass_parts` / `draft_passes_parts` return the two separately (see EngineProfile for
    the overhead formulas). Both reduce the [R, B] inputs to per-replication sums (active count S,
    context sum C) first and then work on [R] arrays, so a call costs a few dozen numpy operations
    on [R]. Every call also checks that weights + KV cache fit (raises CostModelInputError).
    engine None = the issue-3 default (CostModelParams' CPU figures, `EngineProfile.from_params`).
    Build one with `HardwareCostModel.from_presets(...)`.
    """

    gpu: GpuSpec
    target: ModelSpec
    tp: int = 1
    draft: DraftSpec = DraftSpec(kind="ngram")
    params: CostModelParams = CostModelParams()
    allreduce: tuple[AllReduceFit, ...] = ()
    engine: EngineProfile | None = None
    time_unit: str = "ms"
    _engine: EngineProfile = field(init=False, repr=False, compare=False)
    _target_c: PassCoefficients = field(init=False, repr=False, compare=False)
    _draft_c: PassCoefficients | None = field(init=False, repr=False, compare=False)
    _weight_bytes_gpu0: float = field(init=False, repr=False, compare=False)
    _kv_bytes_per_token_gpu0: float = field(init=False, repr=False, compare=False)
    _kv_bytes_per_seq_gpu0: float = field(init=False, repr=False, compare=False)
    # lazily built lookup tables of the attention-free pass time, ms (instance cache, not state)
    _tables: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self):
        check_tp(self.target, self.tp)
        p = self.params
        set_ = object.__setattr__
        set_(self, "_engine", self.engine if self.engine is not None
             else EngineProfile.from_params(p))
        # physics only: the engine's CPU overhead is added by _target_parts / _draft_parts
        set_(self, "_target_c", pass_coefficients(self.gpu, self.target, self.tp, p,
                                                  self.allreduce))
        weight = self.target.weight_bytes / self.tp
        kv = self.target.kv_bytes_per_token / self.tp
        per_seq = 0.0
        d = self.draft
        budget = d.kv_budget_tokens
        if budget is not None:
            _check_int("draft_kv_budget_tokens", budget, 1)
            if d.kind == "ngram":
                raise CostModelInputError(
                    "draft_kv_budget_tokens: an n-gram draft has no KV cache; allowed: a draft "
                    "model, eagle or self")
        if d.kind == "model":
            if d.model is None:
                raise CostModelInputError("draft: kind 'model' needs a draft model preset")
            check_tp(d.model, d.tp, "draft_tp")
            set_(self, "_draft_c", pass_coefficients(self.gpu, d.model, d.tp, p, self.allreduce))
            weight += d.model.weight_bytes / d.tp
            draft_kv = d.model.kv_bytes_per_token / d.tp
        elif d.kind == "eagle":
            h = self.target.hidden_size
            set_(self, "_draft_c", pass_coefficients(
                self.gpu, self.target, self.tp, p, self.allreduce, n_layers=1,
                extra_gemms=[(2 * h, h)]))
            weight += (self.target.layer_params / self.tp + 2 * h * h) * BYTES_PER_VALUE
            draft_kv = self.target.kv_bytes_per_token / self.target.n_layers / self.tp
        elif d.kind == "self":
            if d.model is not None and d.model != self.target:
                raise CostModelInputError("draft: kind 'self' drafts with the target itself")
            if d.tp != self.tp:
                raise CostModelInputError(
                    f"draft_tp: a self-speculation draft runs at the target's tp={self.tp}, "
                    f"got {d.tp}; allowed: {self.tp}")
            set_(self, "_draft_c", self._target_c)
            # no extra weights; without a budget the draft reads the target's own KV cache
            draft_kv = self.target.kv_bytes_per_token / self.tp if budget is not None else 0.0
        elif d.kind == "ngram":
            set_(self, "_draft_c", None)
            draft_kv = 0.0
        else:
            raise CostModelInputError(
                f"draft: unknown kind '{d.kind}'; allowed: {', '.join(DRAFT_KINDS)}")
        if budget is None:
            kv += draft_kv
        else:  # a capped draft cache holds at most `budget` tokens per sequence
            per_seq = draft_kv * budget
        set_(self, "_weight_bytes_gpu0", weight)
        set_(self, "_kv_bytes_per_token_gpu0", kv)
        set_(self, "_kv_bytes_per_seq_gpu0", per_seq)
        need = memory_needed_bytes(weight, kv, 0)
        if need > memory_usable_bytes(self.gpu, p):
            _raise_does_not_fit(self.gpu, p, self._what(), float(need), weight, 0)

    @classmethod
    def from_presets(
        cls,
        gpu: str,
        target: str,
        tp: int = 1,
        draft: str | None = "ngram",
        draft_tp: int = 1,
        preset_paths: Iterable[str | Path] = (),
        params: CostModelParams | None = None,
        engine: EngineProfile | str | None = None,
        draft_kv_budget_tokens: int | None = None,
    ) -> "HardwareCostModel":
        """Build from preset ids. draft: a model id (stand-alone draft), "eagle", "ngram", "self"
        (self-speculation: draft_tp is taken as tp) or None (= "ngram"). params: overrides the
        loaded fitted parameters. engine: an EngineProfile, a profile name of
        src/presets/engines.toml, or None (the issue-3 CostModelParams CPU figures)."""
        presets = load_presets(preset_paths)
        gpu_spec = presets.gpu(gpu)
        target_spec = presets.model(target, "target")
        if draft is None or draft == "ngram":
            draft_spec = DraftSpec(kind="ngram", kv_budget_tokens=draft_kv_budget_tokens)
        elif draft == "eagle":
            draft_spec = DraftSpec(kind="eagle", tp=tp, kv_budget_tokens=draft_kv_budget_tokens)
        elif draft == "self":
            draft_spec = DraftSpec(kind="self", model=target_spec, tp=tp,
                                   kv_budget_tokens=draft_kv_budget_tokens)
        else:
            draft_spec = DraftSpec(kind="model", model=presets.model(draft, "draft"), tp=draft_tp,
                                   kv_budget_tokens=draft_kv_budget_tokens)
        if isinstance(engine, str):
            engine = engine_profile(engine)
        return cls(gpu=gpu_spec, target=target_spec, tp=tp, draft=draft_spec,
                   params=presets.params if params is None else params,
                   allreduce=presets.allreduce, engine=engine)

    @property
    def engine_profile(self) -> EngineProfile:
        """The engine profile in use (the CostModelParams one when `engine` is None)."""
        return self._engine

    def _what(self) -> str:
        d = self.draft
        name = d.model.model_id if d.kind == "model" else d.kind
        return f"{self.target.model_id} at tp={self.tp} with draft {name}"

    def kv_fits(self, batch: int, tokens_per_seq: int) -> tuple[bool, float, float]:
        """(fits, needed GB, usable GB) per GPU for `batch` sequences of `tokens_per_seq` cached
        tokens each (weights + target and draft KV caches)."""
        need = (self._weight_bytes_gpu0 + self._kv_bytes_per_token_gpu0 * batch * tokens_per_seq
                + self._kv_bytes_per_seq_gpu0 * batch)
        usable = memory_usable_bytes(self.gpu, self.params)
        return need <= usable, need / 1e9, usable / 1e9

    def _check_fits(self, kv_tokens: np.ndarray, n_seqs: np.ndarray | None = None) -> None:
        if not kv_tokens.size:
            return
        if self._kv_bytes_per_seq_gpu0 and n_seqs is not None:
            need_r = (self._kv_bytes_per_token_gpu0 * kv_tokens
                      + self._kv_bytes_per_seq_gpu0 * n_seqs)
            worst_r = int(np.argmax(need_r))
            worst, need = float(kv_tokens.flat[worst_r]), self._weight_bytes_gpu0 + float(
                need_r.flat[worst_r])
        else:
            worst = float(kv_tokens.max())
            need = self._weight_bytes_gpu0 + self._kv_bytes_per_token_gpu0 * worst
        if need > memory_usable_bytes(self.gpu, self.params):
            _raise_does_not_fit(self.gpu, self.params, self._what(), need,
                                self._weight_bytes_gpu0, worst)

    def _table_ms(self, which: str, max_seqs: int, max_positions: int) -> np.ndarray:
        """Cached pass_time_table_ms (+ the attention kernels' fixed time; row S = 0 zeroed) of
        the target or draft, physics only; grown when a call needs more positions."""
        key = (which, max_seqs)
        table = self._tables.get(key)
        if table is None or table.shape[1] <= max_positions:
            coeffs = self._target_c if which == "target" else self._draft_c
            table = pass_time_table_ms(coeffs, max_seqs, max(max_positions, 17))
            table += coeffs.attn_fixed_s * 1e3
            table[0, :] = 0.0  # no active sequence, no pass
            self._tables[key] = table
        return table

    @staticmethod
    def _attention_pnorm_ms(c: PassCoefficients, n_seqs, tokens, positions_per_seq, sum_ctx):
        """Attention kernels' roofline time without their fixed part, ms (0 where n_seqs = 0).

        Same formula as attention_terms_s + _pnorm, arranged for few numpy passes:
        m (1 + (k/m)^p)^(1/p) with x^p = exp(p log x).
        """
        p = c.sharpness_p
        memory_ms = (c.attn_read_per_ctx_token_s * 1e3) * sum_ctx + (
            (c.attn_read_per_ctx_token_s + c.attn_per_new_token_s) * 1e3) * tokens
        compute_ms = (c.attn_compute_per_pair_s * 1e3) * (
            positions_per_seq * sum_ctx + tokens * ((positions_per_seq + 1) * 0.5))
        ratio = compute_ms / np.maximum(memory_ms, 1e-300) + 1e-300
        return memory_ms * np.exp(np.log1p(np.exp(p * np.log(ratio))) * (1.0 / p))

    def target_pass_parts(self, active, positions_per_seq, context_len_tokens):
        """(physics_ms[R], overhead_ms[R]) of one target pass; positions_per_seq: int or int[R].

        physics = attention-free table[S, t] + attention p-norm (GPU physics, ideal engine);
        overhead = step CPU + for t > 1 the rejection sampler, KV bookkeeping and the extra
        attention time of a masked verification kernel (EngineProfile).
        """
        n_seqs = np.count_nonzero(active, axis=1)
        sum_ctx = (context_len_tokens * active).sum(axis=1)
        t = np.asarray(positions_per_seq)
        tokens = n_seqs * t
        self._check_fits(sum_ctx + tokens, n_seqs)
        table = self._table_ms("target", active.shape[1], int(t.max()))
        attention = self._attention_pnorm_ms(self._target_c, n_seqs, tokens, t, sum_ctx)
        physics = table.ravel().take(n_seqs * table.shape[1] + t) + attention
        e = self._engine
        verify = t > 1
        per_seq = e.step_cpu_per_seq_ms + verify * (
            e.rejection_sampling_per_position_ms * t + e.kv_bookkeeping_per_seq_ms)
        if e.scoring_batch_expansion:  # every verified position is a sequence of its own
            per_seq = per_seq + verify * (e.step_cpu_per_seq_ms * (t - 1))
        overhead = np.where(n_seqs > 0, e.step_cpu_fixed_ms, 0.0) + n_seqs * per_seq
        if e.scoring_batch_expansion or e.verification_attention_slowdown_factor != 1.0:
            engine_attention = attention
            if e.scoring_batch_expansion:  # S t one-position queries, each reading its whole KV
                engine_attention = self._attention_pnorm_ms(
                    self._target_c, tokens, tokens, 1, t * sum_ctx + n_seqs * (t * (t - 1) * 0.5))
            overhead = overhead + verify * (
                e.verification_attention_slowdown_factor * engine_attention - attention)
        return physics, overhead

    def target_pass_time(self, active, positions_per_seq, context_len_tokens):
        """float[R] ms of one target pass, physics + engine overhead (0 where a replication has
        no active slot). positions_per_seq: int, or int[R] (one value per replication)."""
        physics, overhead = self.target_pass_parts(active, positions_per_seq, context_len_tokens)
        return physics + overhead

    def _draft_sum_ctx(self, active, context_len_tokens, g):
        """Sum over active sequences of the context the mean draft pass reads: C + S (g-1)/2,
        or with a KV budget b, sum_i min(ctx_i + (g-1)/2, b)."""
        b = self.draft.kv_budget_tokens
        if b is None:
            return None
        grown = context_len_tokens + ((np.asarray(g) - 1) * 0.5).reshape(-1, 1)
        return (np.minimum(grown, b) * active).sum(axis=1)

    def draft_passes_parts(self, active, gamma, context_len_tokens):
        """(physics_ms[R], overhead_ms[R]) of gamma sequential one-position draft passes.

        Pass k (k = 0..gamma-1) sees the context sum grown to C + S k (each context capped at the
        draft KV budget, if any). Every term but attention is the same in each pass (times gamma).
        Attention is linear in k in each bound, so the sum is taken in closed form as gamma x the
        pass at the mean context C + S (gamma - 1) / 2 (exact where one bound holds; the p-norm's
        curvature in k makes it a slight underestimate in the knee, < 0.1% for any gamma <= 32).
        Overhead: per-pass CPU and the catch-up pass (EngineProfile).
        """
        n_seqs = np.count_nonzero(active, axis=1)
        g = np.asarray(gamma)
        e = self._engine
        if self._draft_c is None:  # n-gram / prompt lookup: host-side string matching only
            zero = np.zeros(n_seqs.shape)
            return zero, np.where(n_seqs > 0, g * e.ngram_pass_cpu_ms, 0.0)
        sum_ctx = (context_len_tokens * active).sum(axis=1)
        self._check_fits(sum_ctx + n_seqs * (g + 1), n_seqs)
        catchup = e.draft_catchup_positions_per_seq
        table = self._table_ms("draft", active.shape[1], 1 + catchup)
        capped = self._draft_sum_ctx(active, context_len_tokens, g)
        mid_ctx = sum_ctx + n_seqs * ((g - 1) * 0.5) if capped is None else capped
        per_pass_ms = table[:, 1].take(n_seqs) + self._attention_pnorm_ms(
            self._draft_c, n_seqs, n_seqs, 1, mid_ctx)
        physics = g * per_pass_ms
        overhead = g * (np.where(n_seqs > 0, e.draft_pass_cpu_fixed_ms, 0.0)
                        + e.draft_pass_cpu_per_seq_ms * n_seqs)
        if catchup:
            b = self.draft.kv_budget_tokens
            ctx0 = sum_ctx if b is None else (np.minimum(context_len_tokens, b) * active).sum(axis=1)
            wide = 1 + catchup
            extra = (table[:, wide].take(n_seqs) - table[:, 1].take(n_seqs)
                     + self._attention_pnorm_ms(self._draft_c, n_seqs, n_seqs * wide, wide, ctx0)
                     - self._attention_pnorm_ms(self._draft_c, n_seqs, n_seqs, 1, ctx0))
            overhead = overhead + np.where(g > 0, extra, 0.0)
        return physics, overhead

    def draft_passes_time(self, active, gamma, context_len_tokens):
        """float[R] ms of gamma sequential one-position draft passes (gamma: int or int[R]),
        physics + engine overhead; see draft_passes_parts."""
        physics, overhead = self.draft_passes_parts(active, gamma, context_len_tokens)
        return physics + overhead

    def step_breakdown(self, batch: int, gamma: int, context_len_tokens: int) -> StepBreakdown:
        """T_AR, T_V and gamma T_D of `batch` sequences all at `context_len_tokens`, each split
        into physics and engine overhead (MagicDec's notation; Chen et al. 2024)."""
        batch = _check_int("batch", batch, 1)
        gamma = _check_int("gamma", gamma, 1)
        context_len_tokens = _check_int("context", context_len_tokens, 0)
        active = np.ones((1, batch), bool)
        ctx = np.full((1, batch), context_len_tokens)
        dec = self.target_pass_parts(active, 1, ctx)
        ver = self.target_pass_parts(active, gamma + 1, ctx)
        dra = self.draft_passes_parts(active, gamma, ctx)
        return StepBreakdown(
            batch=batch, gamma=gamma, context_len_tokens=context_len_tokens,
            decode_physics_ms=float(dec[0][0]), decode_overhead_ms=float(dec[1][0]),
            verify_physics_ms=float(ver[0][0]), verify_overhead_ms=float(ver[1][0]),
            draft_physics_ms=float(dra[0][0]), draft_overhead_ms=float(dra[1][0]))
