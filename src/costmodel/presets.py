"""Presets: datasheet figures of GPUs, shapes of models and the fitted parameters of the hardware
model, read from src/presets/*.toml (and user files merged over them); input checks shared by the
cost-model modules. design.md ("Presets", "Parameters") gives every figure's source.
"""
from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

import src.costmodel.hf_ids as hf_ids
import src.costmodel.shapes as shapes
from src.config import ConfigError, coerce, read_toml
from src.costmodel.content_cache import by_content, memo_presets, memoised  # noqa: F401
from src.costmodel.formats import KV_CACHE_FORMATS, WEIGHT_FORMATS
from src.costmodel.hf_config import looks_like_config_path, model_fields_from_config
from src.costmodel.hf_ids import looks_like_hf_id
from src.errors import ascii_int

PRESETS_DIR = Path(__file__).resolve().parents[1] / "presets"
BUILTIN_PRESET_FILES = (
    PRESETS_DIR / "gpus.toml", PRESETS_DIR / "models.toml",
    PRESETS_DIR / "costmodel_params.toml",
    PRESETS_DIR / "h200_calibration.toml",  # `python run.py calibrate` on the H200 measurements
    PRESETS_DIR / "host_fits.toml",  # `silicon-validate --refit` on the h100_sxm rows only
)
BYTES_PER_VALUE = 2  # BF16 weights, activations and KV cache
PRESET_TABLES = ("gpus", "models", "params", "allreduce", "attention", "engines")
ATTENTION_KERNEL_NAMES = ("flash", "cudnn")  # kernels with a tile model (attention.py)


class CostModelInputError(ConfigError):
    """A bad input to the hardware cost model: one line '<field>: <what is allowed>'; the field is
    in `field_name` (a preset table key, a command-line quantity such as tp or batch)."""


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
    # streaming multiprocessors (datasheet / whitepaper); needed by the fitted attention kernels
    # and the GEMM wave quantisation below, unused otherwise
    sm_count: int | None = None
    # Achieved efficiencies fitted to this GPU's own measured step times (`python run.py
    # calibrate`; design.md, "Calibration"). None = the shared CostModelParams value (vidur fit).
    # Fraction of peak DRAM bandwidth that streams the weights of GEMMs with more than
    # SMALL_GEMM_MAX_ROWS rows, activations, elementwise kernels and roofline attention:
    memory_bandwidth_efficiency_fraction: float | None = None
    # ... the weights of GEMMs with 2..SMALL_GEMM_MAX_ROWS rows (tiled small-M GEMM kernels):
    small_gemm_bandwidth_efficiency_fraction: float | None = None
    # ... the weights of 1-row GEMMs (matrix-vector kernels: a decode step at batch 1):
    gemv_bandwidth_efficiency_fraction: float | None = None
    # fraction of dense BF16 peak that GEMMs reach when compute-bound:
    compute_efficiency_fraction: float | None = None
    # p of the GEMM smooth roofline pnorm(memory, compute):
    roofline_sharpness_p: float | None = None
    # output-tile edge of the GEMMs' wave quantisation: an M x N GEMM runs ceil(M/t) ceil(N/t)
    # tiles in waves of sm_count, so its compute time is scaled by waves x sm_count / tiles
    # (None: no quantisation)
    gemm_wave_tile: int | None = None
    # softmax cost of one (query, key) pair in fitted attention kernels, in tensor-core
    # FLOP-equivalents (one exp per pair at the SFU rate; design.md, "Calibration")
    attention_softmax_flops_per_pair: float | None = None
    # Low-precision tensor cores (datasheet, dense: half the sparsity figure); None = the GPU has
    # none of that class, and a GEMM in such a format runs upcast to BF16 where the format is in
    # weight_only_formats, else is refused (src/costmodel/formats.py)
    dense_fp8_tflops: float | None = None
    dense_fp4_tflops: float | None = None
    # comma-separated weight formats the GPU runs by upcasting to BF16 (weight-only kernels)
    weight_only_formats: str = ""
    # AIConfigurator's system folder (systems/data/<system>; src/kernels/sources.py); "" = none
    kernel_system: str = ""

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
    # --- Mixture of Experts (0 = dense; src/costmodel/moe.py, design.md "Mixture of Experts")
    n_routed_experts: int = 0  # E routed experts per MoE layer
    experts_per_token: int = 0  # k experts each token is routed to
    moe_intermediate_size: int = 0  # SwiGLU width of one routed (and one shared) expert
    n_shared_experts: int = 0  # experts every token goes through, in every MoE layer
    first_k_dense_replace: int = 0  # leading dense layers (FFN intermediate_size) before the MoE
    routing: str = "locality"  # routing model: "uniform" or "locality" (moe.ROUTING_MODELS)
    routing_locality_fraction: float | None = None  # rho; None = moe.DEFAULT_ROUTING_LOCALITY
    # --- attention variants (src/costmodel/shapes.py)
    attention: str = "gqa"  # "gqa" (incl. MHA) or "mla" (multi-head latent attention)
    q_lora_rank: int = 0  # MLA: query down-projection rank (0 = direct query projection)
    kv_lora_rank: int = 0  # MLA: latent KV width cached per token per layer
    qk_nope_head_dim: int = 0  # MLA: per-head query/key width without rotary
    qk_rope_head_dim: int = 0  # MLA: rotary key width, cached per token per layer (shared)
    v_head_dim: int = 0  # MLA: per-head value width
    sliding_window_tokens: int = 0  # window of the sliding-window layers (0 = none)
    sliding_window_layers: int = 0  # how many layers use the window (the rest: full attention)
    attention_sinks: bool = False  # learned per-head sink logits (gpt-oss): no cost modelled
    # --- number formats (src/costmodel/formats.py): embeddings, LM head and routers stay BF16
    weight_format: str = "bf16"  # attention, dense FFN and shared-expert weights
    expert_weight_format: str = ""  # routed-expert weights ("" = weight_format)
    kv_cache_format: str = "bf16"  # KV cache
    # --- drafts (hardware.DraftSpec kinds "mtp", "eagle3")
    mtp_layers: int = 0  # multi-token-prediction modules in the checkpoint (DeepSeek-V3: 1)
    architecture: str = "decoder"  # "decoder", or "eagle3" for an EAGLE-3 head preset
    draft_vocab_size: int = 0  # an EAGLE-3 head's own output vocabulary (0 = vocab_size)
    eagle3_fused_layers: int = 3  # target layers whose hidden states an EAGLE-3 head fuses
    # KV heads of the target's published EAGLE(-1/2) head where they differ from the target's
    # (0 = the target's): Mixtral's head is full multi-head attention (32) over a GQA target (8)
    eagle_head_n_kv_heads: int = 0
    # a public Hugging Face repository of an EAGLE-3 head preset's weights, where hf_name names
    # the training config its shape comes from ("" = none known): recommend's default draft path
    weights_repository: str = ""

    @property
    def is_plain(self) -> bool:
        """A dense BF16 Llama-style decoder: the formulas below; anything else (MoE, MLA, sliding
        windows, other formats, an EAGLE-3 head) goes through src/costmodel/shapes.py."""
        return (self.n_routed_experts == 0 and self.attention == "gqa"
                and not self.sliding_window_tokens and self.weight_format == "bf16"
                and self.expert_weight_format in ("", "bf16") and self.kv_cache_format == "bf16"
                and self.architecture == "decoder")

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
        if not self.is_plain:
            return shapes.total_params(self)
        embed = self.vocab_size * self.hidden_size
        head = 0 if self.tied_embeddings else embed
        return self.n_layers * self.layer_params + embed + head + self.hidden_size

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (each component in its format: shapes.weight_bytes)."""
        if not self.is_plain:
            return shapes.weight_bytes(self)
        return self.total_params * BYTES_PER_VALUE

    @property
    def active_params(self) -> int:
        """Parameters one token goes through (= total_params for a dense model)."""
        return self.total_params if self.is_plain else shapes.active_params(self)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV cache per token, all layers: 2 (K and V) x layers x KV heads x head dim x 2 bytes
        (MLA, sliding windows and FP8 caches: shapes.kv_bytes_per_token, full-attention layers
        only; the window layers' cache is per sequence: shapes.window_kv_bytes_per_seq)."""
        if not self.is_plain:
            return shapes.kv_bytes_per_token(self)
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
class AttentionKernelFit:
    """Achieved efficiencies of one attention kernel on one GPU (src/costmodel/attention.py),
    fitted by `python run.py calibrate` to that GPU's measured step times."""

    gpu_id: str  # GPU preset the fit belongs to
    kernel: str  # attention kernel: "flash" or "cudnn" (attention.KERNEL_SHAPES)
    compute_efficiency_fraction: float  # of dense BF16 peak, on the kernel's padded tiles
    memory_bandwidth_efficiency_fraction: float  # of peak DRAM bandwidth, reading the KV cache


def model_from_config(path: str, field_name: str) -> "ModelSpec":
    """The ModelSpec of a Hugging Face config.json (hf_config.py), checked like a preset; its id
    is the path. CostModelInputError(field_name, one line) where the file does not do."""
    try:
        spec = ModelSpec(model_id=path, **model_fields_from_config(path, field_name))
        return check_model(spec, path)
    except CostModelInputError as e:
        if e.field_name == field_name:
            raise
        raise CostModelInputError(field_name, str(e)) from None
    except ConfigError as e:
        raise CostModelInputError(field_name, e.allowed) from None


def model_from_hf_id(hf_id: str, field_name: str) -> "ModelSpec":
    """The ModelSpec of a Hugging Face id bundled with aiconfigurator-core (hf_ids.py): its
    config.json read as model_from_config reads a path, with the id as model_id and hf_name (the
    model an engine serves) and the ModelOpt sidecar's weight format where the config.json has
    none. CostModelInputError(field_name, one line) for an id not bundled (the closest ones named)
    or a file the cost model does not model."""
    path = hf_ids.bundled_config(hf_id)
    if path is None:
        raise CostModelInputError(field_name, hf_ids.unknown_id_message(hf_id))
    shown = hf_ids.display_name(hf_id)
    try:
        spec = replace(model_from_config(str(path), field_name), model_id=hf_id, hf_name=hf_id,
                       source=shown, **hf_ids.sidecar_formats(hf_id, field_name))
        return check_model(spec, hf_id)
    except ConfigError as e:
        text = e.allowed if e.field_name == field_name else str(e)
        raise CostModelInputError(field_name, text.replace(str(path), shown)) from None


def _preset_of_hf_name(models: Mapping, hf_id: str) -> "ModelSpec | None":
    """The one preset whose Hugging Face repository (hf_name) is `hf_id`, or None: a preset wins
    over a bundled file of the same id (its extra fields, e.g. an EAGLE head's shape, and its
    citation come with it). Entries read from a file earlier are not presets."""
    hits = [m for k, m in models.items()
            if m.hf_name == hf_id and not looks_like_config_path(k) and not looks_like_hf_id(k)]
    return hits[0] if len(hits) == 1 else None


def _model_from_file(models: Mapping, model_id: str, field_name: str) -> "ModelSpec | None":
    """The ModelSpec of a config.json path, or of a Hugging Face id (the preset of that hf_name,
    else the bundled file); None for anything else."""
    if looks_like_config_path(model_id):
        return model_from_config(model_id, field_name)
    if looks_like_hf_id(model_id):
        return (_preset_of_hf_name(models, model_id)
                or model_from_hf_id(model_id, field_name))
    return None


class ModelTable(dict):
    """Model presets by id; a key naming a config.json file (ending in .json) or a Hugging Face
    id (org/name: a preset of that hf_name, else aiconfigurator-core's bundled model_configs/ file,
    offline) is read on first use, so every `presets.models[...]` and `in presets.models` takes
    one; a preset of the key's own name always wins. An org/name that is not bundled is `in` the
    table and raises CostModelInputError (naming the closest bundled ids) when looked up, as a
    missing .json does."""

    def __missing__(self, key):
        spec = _model_from_file(self, key, "model")
        if spec is None:
            raise KeyError(key)
        self[key] = spec
        return spec

    def __contains__(self, key) -> bool:
        return (dict.__contains__(self, key) or looks_like_config_path(key)
                or looks_like_hf_id(key))


@dataclass(frozen=True)
class Presets:
    """Everything the hardware model reads from data files."""

    gpus: Mapping[str, GpuSpec]
    models: Mapping[str, ModelSpec]
    params: CostModelParams
    allreduce: tuple[AllReduceFit, ...]
    attention: tuple[AttentionKernelFit, ...] = ()

    def gpu(self, gpu_id: str, field_name: str = "gpu") -> GpuSpec:
        if gpu_id not in self.gpus:
            raise CostModelInputError(
                field_name, f"unknown GPU '{gpu_id}'; known: {', '.join(sorted(self.gpus))}")
        return self.gpus[gpu_id]

    def model(self, model_id: str, field_name: str = "model") -> ModelSpec:
        """A preset by id, or the model of a config.json path (model_from_config) or of a bundled
        Hugging Face id (a preset of that id or hf_name, else model_from_hf_id)."""
        if not dict.__contains__(self.models, model_id):
            spec = _model_from_file(self.models, model_id, field_name)
            if spec is not None:
                if isinstance(self.models, dict):
                    self.models[model_id] = spec
                return spec
        if model_id not in self.models:
            raise CostModelInputError(
                field_name, f"unknown model '{model_id}'; known: {', '.join(sorted(self.models))}, "
                "a config.json path or a Hugging Face id such as Qwen/Qwen3-32B")
        return self.models[model_id]


def _where(table_name: str, entry_id: str) -> str:
    return f"{table_name}.{entry_id}" if entry_id else table_name


def _coerce_fields(cls, table_name: str, entry_id: str, raw: Mapping, partial: bool) -> dict:
    """Check and convert one TOML table to the keyword arguments of `cls` (minus the id field)."""
    where = _where(table_name, entry_id)
    id_fields = {GpuSpec: ("gpu_id",), ModelSpec: ("model_id",),
                 AttentionKernelFit: ("gpu_id", "kernel")}.get(cls, ())
    wanted = {f.name: f for f in fields(cls) if f.name not in id_fields}
    unknown = sorted(set(raw) - set(wanted))
    if unknown:
        raise CostModelInputError(
            where, f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(wanted)}")
    if not partial:
        required = [name for name, f in wanted.items() if f.default is MISSING]
        missing = [name for name in required if name not in raw]
        if missing:
            raise CostModelInputError(
                where, f"missing field(s) {', '.join(missing)}; required: {', '.join(required)}")
    return {name: coerce(f"{where}.{name}", value, wanted[name].type, CostModelInputError)
            for name, value in raw.items()}


# ModelSpec fields where 0 means "none" (a dense model, no window, no MTP module, ...)
ZERO_ALLOWED_FIELDS = frozenset((
    "n_routed_experts", "experts_per_token", "moe_intermediate_size", "n_shared_experts",
    "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "v_head_dim", "sliding_window_tokens", "sliding_window_layers",
    "mtp_layers", "draft_vocab_size", "eagle_head_n_kv_heads"))
MODEL_CHOICES = {"routing": ("uniform", "locality"), "attention": ("gqa", "mla"),
                 "weight_format": WEIGHT_FORMATS, "expert_weight_format": ("", *WEIGHT_FORMATS),
                 "kv_cache_format": KV_CACHE_FORMATS, "architecture": ("decoder", "eagle3")}


def check_model(m: ModelSpec, where: str) -> ModelSpec:
    """The cross-field rules of a model preset (one CostModelInputError naming the field)."""
    for name, allowed in MODEL_CHOICES.items():
        if getattr(m, name) not in allowed:
            raise CostModelInputError(f"{where}.{name}", f"unknown {getattr(m, name)!r}; "
                                      f"allowed: {', '.join(a or '(empty)' for a in allowed)}")
    H, kv = m.n_heads, m.n_kv_heads
    if kv > H or H % kv:  # grouped-query attention: each KV head serves H / kv query heads
        raise CostModelInputError(f"{where}.n_kv_heads", f"{kv} KV heads with {H} query heads; "
                                  f"allowed: a divisor of {H} (each KV head serves a whole group "
                                  "of query heads)")
    E, k = m.n_routed_experts, m.experts_per_token
    if E or k:
        if not 1 <= k <= max(E, 1):
            raise CostModelInputError(f"{where}.experts_per_token", f"{k} with {E} routed "
                                      f"experts; allowed: 1..{E} (top-k cannot exceed E)")
        if m.moe_intermediate_size < 1:
            raise CostModelInputError(f"{where}.moe_intermediate_size",
                                      "required (> 0) for a MoE model")
        if m.first_k_dense_replace > m.n_layers:
            raise CostModelInputError(f"{where}.first_k_dense_replace",
                                      f"at most n_layers = {m.n_layers}")
    rho = m.routing_locality_fraction
    if rho is not None and not 0.0 <= rho < 1.0:
        raise CostModelInputError(f"{where}.routing_locality_fraction",
                                  f"{rho} is outside 0..1 (exclusive of 1)")
    if m.attention == "mla":
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(m, name) < 1:
                raise CostModelInputError(f"{where}.{name}", "required (> 0) for attention mla")
    if m.sliding_window_layers > m.n_layers or (m.sliding_window_layers
                                                and not m.sliding_window_tokens):
        raise CostModelInputError(f"{where}.sliding_window_layers", f"0..{m.n_layers}, and "
                                  "only with sliding_window_tokens > 0")
    return m


KERNEL_SYSTEM_RE = re.compile(r"^[a-z0-9_]*$")


def _check_gpu(g: GpuSpec) -> GpuSpec:
    if not KERNEL_SYSTEM_RE.match(g.kernel_system):  # e.g. 'h200_sxm'
        raise CostModelInputError(f"gpus.{g.gpu_id}.kernel_system", f"bad '{g.kernel_system}'; "
                                  "allowed: '' or a folder of aiconfigurator_core/systems/data")
    return g


def _check_positive_fields(table_name: str, entry_id: str, values: Mapping) -> None:
    for name, value in values.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not value > 0:
            where = f"{_where(table_name, entry_id)}.{name}"
            if name in ZERO_ALLOWED_FIELDS and value == 0:
                continue
            if name.endswith("_fraction") or name.endswith("_ms") or name.endswith("_us"):
                if value < 0:
                    raise CostModelInputError(where, f"must be >= 0, got {value}")
                continue
            raise CostModelInputError(where, f"must be > 0, got {value}")


def preset_files(extra_paths: Iterable[str | Path] = ()) -> tuple[Path, ...]:
    """The files a preset load reads, in order: the built-in ones that exist, then extra_paths."""
    return (*(p for p in BUILTIN_PRESET_FILES if p.is_file()), *map(Path, extra_paths))


def load_presets(extra_paths: Iterable[str | Path] = ()) -> Presets:
    """(memoised within memo_presets()) Built-in presets with each file of `extra_paths` merged
    over them, in order; see _load_presets. Parsed and checked once per content of the files
    (by_content); each call gets its own model and GPU tables (a config.json model a lookup
    reads is kept in the caller's table only)."""
    paths = tuple(extra_paths)

    def fresh():
        kept = by_content(("presets", *map(str, paths)), preset_files(paths),
                          lambda: _load_presets(paths))
        return replace(kept, gpus=dict(kept.gpus), models=ModelTable(kept.models))
    return memoised(("presets", *map(str, paths)), fresh)


def _load_presets(extra_paths: Iterable[str | Path] = ()) -> Presets:
    """Built-in presets with each file of `extra_paths` merged over them, in order.

    A preset file may hold any of: [gpus.<id>] (GpuSpec fields), [models.<id>] (ModelSpec fields),
    [params] (CostModelParams fields), [allreduce.<gpu id>] with keys = GPU count and values
    {latency_us, bus_bandwidth_gb_per_s}, and [attention.<gpu id>.<kernel>] with the
    AttentionKernelFit fields. An id that already exists is updated field by field; a new id must
    give every field. [engines.<name>] tables are allowed too (engine-profile fields, read by
    load_engine_profiles).
    """
    gpus: dict[str, dict] = {}
    models: dict[str, dict] = {}
    params: dict = {}
    allreduce: dict[tuple[str, int], AllReduceFit] = {}
    attention: dict[tuple[str, str], AttentionKernelFit] = {}
    for path in (*BUILTIN_PRESET_FILES, *map(Path, extra_paths)):
        if path in BUILTIN_PRESET_FILES and not path.is_file():
            continue
        data = read_toml(path, "presets", CostModelInputError)
        unknown = sorted(set(data) - set(PRESET_TABLES))
        if unknown:
            raise CostModelInputError(
                "presets", f"{path} has unknown table(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(PRESET_TABLES)}")
        for table_name, cls, store in (("gpus", GpuSpec, gpus), ("models", ModelSpec, models)):
            for entry_id, raw in data.get(table_name, {}).items():
                if not isinstance(raw, dict):
                    raise CostModelInputError(f"{table_name}.{entry_id}", "must be a table")
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
                    n_gpus = ascii_int(n_text)
                    fit = AllReduceFit(gpu_id, n_gpus, float(raw["latency_us"]),
                                       float(raw["bus_bandwidth_gb_per_s"]))
                except (KeyError, TypeError, ValueError):
                    raise CostModelInputError(
                        f"allreduce.{gpu_id}.{n_text}",
                        "expected a GPU count key with {latency_us, "
                        "bus_bandwidth_gb_per_s}") from None
                allreduce[(gpu_id, n_gpus)] = fit
        for gpu_id, per_kernel in data.get("attention", {}).items():
            for kernel, raw in per_kernel.items() if isinstance(per_kernel, dict) else ():
                where = f"attention.{gpu_id}"
                if kernel not in ATTENTION_KERNEL_NAMES:
                    raise CostModelInputError(f"{where}.{kernel}", "unknown attention kernel; "
                                              f"allowed: {', '.join(ATTENTION_KERNEL_NAMES)}")
                if not isinstance(raw, dict):
                    raise CostModelInputError(f"{where}.{kernel}", "must be a table")
                values = _coerce_fields(AttentionKernelFit, where, kernel, raw, partial=False)
                _check_positive_fields(where, kernel, values)
                attention[(gpu_id, kernel)] = AttentionKernelFit(gpu_id, kernel, **values)
    return Presets(
        gpus={k: _check_gpu(GpuSpec(gpu_id=k, **v)) for k, v in gpus.items()},
        models=ModelTable({k: check_model(ModelSpec(model_id=k, **v), f"models.{k}")
                           for k, v in models.items()}),
        params=replace(CostModelParams(), **params),
        allreduce=tuple(allreduce.values()),
        attention=tuple(attention.values()),
    )


def check_int(name: str, value, minimum: int) -> int:
    """An integer >= minimum, else CostModelInputError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise CostModelInputError(name, f"must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _tp_ok(model: ModelSpec, tp: int) -> bool:
    kv = model.n_kv_heads
    return model.n_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)


def check_tp(model: ModelSpec, tp: int, field_name: str = "tp") -> int:
    """TP must divide the query heads, and divide the KV heads or be a multiple of them (each
    GPU then holds one KV head, replicated tp / n_kv_heads times, as vLLM and SGLang do)."""
    tp = check_int(field_name, tp, 1)
    if not _tp_ok(model, tp):
        allowed = [d for d in range(1, model.n_heads + 1) if _tp_ok(model, d)]
        failing = " and ".join(f"{name}={n}"
                               for name, n in (("n_heads", model.n_heads),
                                               ("n_kv_heads", model.n_kv_heads))
                               if n % tp)
        raise CostModelInputError(
            field_name, f"{tp} does not divide {failing} of {model.model_id}; allowed: "
            f"{', '.join(map(str, allowed))}")
    return tp
