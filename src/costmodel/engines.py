"""Engine overhead profiles: what a serving engine spends beyond the GPU physics.

Per-step CPU work, the rejection sampler, KV bookkeeping, the draft's catch-up pass and the
verification kernel's extra attention time, per engine and version, and the mechanisms of today's
engines: CPU work overlapped with the GPU (asynchronous scheduling), the first draft pass over all
verified positions, the n-gram proposer called once per step, and the all-reduce implementation
(src/presets/engines.toml; design.md, "Engine profiles", gives every figure's source).
"""
from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Iterable

from src.config import coerce, read_toml
from src.costmodel.allreduce import ALLREDUCE_IMPLEMENTATIONS
from src.costmodel.content_cache import by_content
from src.costmodel.presets import (
    BUILTIN_PRESET_FILES,
    PRESETS_DIR,
    CostModelInputError,
    memoised,
    preset_files,
)

ENGINE_PROFILES_FILE = PRESETS_DIR / "engines.toml"
# how drafts are made (drafts.DraftSpec)
DRAFT_KINDS = ("model", "eagle", "eagle3", "mtp", "ngram", "self")
# attention_kernel values: the GPU's roofline, a kernel fitted on that GPU (src/costmodel/
# attention.py; `python run.py calibrate`), or the faster of the fitted ones per pass. A GPU
# without a fit for the named kernel falls back to its roofline attention.
ATTENTION_KERNEL_CHOICES = ("roofline", "flash", "cudnn", "best")
# gemm_efficiency_source values (EngineProfile)
GEMM_EFFICIENCY_SOURCES = ("preset", "tables")
# prefill_scheduling values: how the serving engine (src/online/engine.py) puts prompts into
# steps. "chunked": vLLM V1's scheduler (decodes first, prompt chunks fill the token budget's
# rest); "prefill_first": vLLM v0's default scheduler without chunked prefill (a step with a
# waiting prompt that fits is a prefill-only step of whole prompts; otherwise a decode step)
PREFILL_SCHEDULING_CHOICES = ("chunked", "prefill_first")
# attention_dp_moe_comm values (src/attention_dp/moe_comm.py)
ATTENTION_DP_MOE_COMM_CHOICES = ("alltoall", "nvlink_alltoall", "allgather_reducescatter")
# kernel_tables backends: the engine folders of AIConfigurator's database (aiconfigurator_core/
# systems/data/<system>/<op>/<backend>/, aiconfigurator-core 0.12.0) -> the printed engine name
BACKEND_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
KERNEL_TABLES_RE = re.compile(r"^(vllm|sglang|trtllm)/[0-9][0-9A-Za-z.+_-]*$")


@dataclass(frozen=True)
class EngineProfile:
    """Overheads of one serving engine on top of the GPU physics (src/presets/engines.toml).

    For S active sequences, C = sum of their contexts, t positions per sequence, gamma drafts:

        target pass (greedy decode, t = 1, or verification, t = gamma + 1):
            overhead = step_cpu_fixed_ms + step_cpu_per_seq_ms S
                       + [t > 1] ( (rejection_sampling_per_position_ms t
                                      + kv_bookkeeping_per_seq_ms) S
                                   + [scoring_batch_expansion] step_cpu_per_seq_ms S (t - 1)
                                   + verification_attention_slowdown_factor attn' - attn(S, t, C) )
            attn' = attn(S, t, C), or with scoring_batch_expansion the attention of S t
            one-position sequences, sequence (i, j) reading ctx_i + j - 1 cached tokens:
            attn(S t, 1, t C + S t (t - 1) / 2)
        gamma draft-model / EAGLE / self-speculation passes:
            overhead = gamma (draft_pass_cpu_fixed_ms + draft_pass_cpu_per_seq_ms S)
                       + [e > 0] ( pass(S, 1 + e, C) - pass(S, 1, C) ),
            e = draft_catchup_positions_per_seq
        gamma n-gram passes:  overhead = gamma ngram_pass_cpu_ms

    attn(S, t, C) is the GPU-physics attention time of the pass and pass(S, t, C) the draft's
    whole GPU-physics pass time: the catch-up pass (the draft re-reading the tokens committed in
    the previous step that its KV cache lacks) is GPU work, but work an ideal engine avoids, so it
    is reported as engine overhead. Every term is 0 where S = 0. The `ideal` profile has every
    term 0 and factor 1: zero overhead on the profile's kernels (not a lower bound).

    Mechanisms of today's engines (optional in the TOML; the defaults reproduce the above):
        draft_first_pass_covers_verified: the first draft pass of a step runs over all gamma + 1
            verified positions of each sequence (vLLM V1 and SGLang feed the drafter every
            verified position), so e = gamma instead of draft_catchup_positions_per_seq, for
            drafts with state of their own (a draft model, an EAGLE head; not self-speculation,
            whose draft window is filled by the target's own verification pass).
        ngram_one_call_per_step: the n-gram proposer finds all gamma drafts in one call, so the
            n-gram overhead is ngram_pass_cpu_ms once per step instead of gamma times.
        cpu_overlap_decode / cpu_overlap_draft_kinds: asynchronous scheduling - the CPU work of a
            step runs while the GPU executes the previous one - for greedy decode steps / for
            speculative steps with the listed draft kinds. The step's CPU terms (step CPU,
            rejection sampling, KV bookkeeping, batch-expansion CPU, draft-pass and n-gram CPU)
            then cost only what the step's GPU work does not hide:
                exposed = max(0, CPU of the step - GPU time of the step)
            GPU time = physics + GPU overheads (verification-attention excess, catch-up). It is
            booked on the target pass; the draft passes keep only their GPU overhead.
        allreduce: "nccl" (the fitted NCCL model) or "custom" (vLLM's and SGLang's custom
            all-reduce; src/costmodel/allreduce.py). It changes the physics of a pass at TP > 1.
        prefill_scheduling: "chunked" or "prefill_first" (PREFILL_SCHEDULING_CHOICES): the
            serving engine's scheduler; no effect on a pass's price.

    The implementation fields (kernels_per_layer ... launch_overlap_p) describe how the passes run
    on the GPU: kernel counts times the GPU's fixed cost per kernel, the attention kernel, and
    CUDA graphs or eager launches. Without CUDA graphs a pass of N kernels and GPU time g costs
    pnorm(g + N launch_gap, N cpu_launch, launch_overlap_p) (the CPU issues kernels while the GPU
    runs earlier ones); the excess over g is reported as overhead ("launch"). SGLang's graphs end
    at a batch (cuda_graph_max_batch_by_gpu_memory; a pass over more sequences pays the eager
    launch cost), vLLM's at a token count (cuda_graph_max_tokens: a pass over more sequences x
    positions pays it). SGLang's replay the drafts of a step in two graphs
    (draft_passes_one_graph), and leave
    spec_step_eager_kernels kernels between them (n of them cost pnorm(n (kernel_fixed +
    launch_gap), n cpu_launch, launch_overlap_p) per verification, booked as GPU overhead).
    """

    name: str  # profile id, e.g. "ideal" or "vllm-2024"
    description: str  # one line: which engine and version the numbers stand for
    # CPU per target pass independent of batch (schedule, prepare, sample, launch, outputs), ms
    step_cpu_fixed_ms: float
    step_cpu_per_seq_ms: float  # CPU per target pass per active sequence, ms
    # CPU per draft-model / EAGLE pass independent of batch (launch + sampler), ms
    draft_pass_cpu_fixed_ms: float
    draft_pass_cpu_per_seq_ms: float  # CPU per draft pass per active sequence, ms
    ngram_pass_cpu_ms: float  # CPU of one prompt-lookup (n-gram) proposal pass, ms
    # rejection sampler per verified position (gamma + 1 per sequence), ms
    rejection_sampling_per_position_ms: float
    # KV slots for gamma+1 positions + rollback of rejected ones, per sequence per step, ms
    kv_bookkeeping_per_seq_ms: float
    # extra positions in the first draft pass of a step (draft re-reads committed tokens)
    draft_catchup_positions_per_seq: int
    # attention time of a verification pass / that of a decode-style kernel (>= 1)
    verification_attention_slowdown_factor: float
    # verification run as S (gamma+1) one-position sequences: per-seq step CPU and KV reads paid per
    # position
    scoring_batch_expansion: bool = False
    # first draft pass of a step over the gamma + 1 verified positions (e = gamma)
    draft_first_pass_covers_verified: bool = False
    # n-gram proposer called once per step (all gamma drafts), not once per draft
    ngram_one_call_per_step: bool = False
    # greedy decode steps: CPU work overlapped with the GPU (asynchronous scheduling)
    cpu_overlap_decode: bool = False
    # a MoE layer's shared experts run on a second CUDA stream beside its routed experts, so the
    # layer costs max(routed, shared, the roofline of both), not their sum (measured pricing:
    # pass_gemms.py shared_hidden_ms)
    shared_experts_overlap: bool = False
    # draft kinds (DRAFT_KINDS) whose speculative steps overlap CPU and GPU
    cpu_overlap_draft_kinds: tuple[str, ...] = ()
    # tensor-parallel all-reduce: "nccl" or "custom" (src/costmodel/allreduce.py)
    allreduce: str = "nccl"
    # the serving engine's scheduler: "chunked" or "prefill_first" (PREFILL_SCHEDULING_CHOICES)
    prefill_scheduling: str = "chunked"
    # How the engine's forward pass runs on the GPU (the implementation; roofline.py turns these
    # into GPU time, so they change the physics, not the overhead). Defaults: sarathi-serve's
    # kernels as vidur profiles them, CUDA graphs, the GPU's roofline attention.
    # non-attention kernels per decoder layer (a fused engine launches fewer)
    kernels_per_layer: int = 10
    # KV-cache write + attention kernel, per decoder layer
    attention_kernels_per_layer: int = 2
    # extra kernels per layer in a pass that scores more than one position per sequence
    verification_extra_kernels_per_layer: float = 0.0
    # kernels outside the decoder layers (final norm, LM head; embedding, argmax)
    kernels_per_pass: int = 2
    # roofline, flash, cudnn or best (the faster fitted kernel per pass)
    attention_kernel: str = "roofline"
    # passes replayed from CUDA graphs: no CPU launch cost per kernel
    cuda_graphs: bool = True
    # whose GEMM efficiencies the roofline uses: "preset" (the GPU preset's: vidur fit, or `run.py
    # calibrate` on the H200's PyTorch passes) or "tables" (re-fitted to the engine's measured
    # GEMMs, src/presets/kernel_efficiency.toml, on the GPUs it covers; src/costmodel/
    # kernel_efficiency.py)
    gemm_efficiency_source: str = "preset"
    # without CUDA graphs: CPU time to issue one kernel, us
    cpu_launch_us_per_kernel: float = 0.0
    # without CUDA graphs: GPU idle time per kernel launched singly, us
    launch_gap_us_per_kernel: float = 0.0
    # without CUDA graphs: sharpness p of pnorm(GPU time, CPU launch time)
    launch_overlap_p: float = 4.0
    # the three launch fields above taken from this profile where this one leaves them out (the
    # eager launch cost of a pass run outside CUDA graphs); "" = none
    eager_launch_costs_from: str = ""
    # CUDA graphs only up to a batch that depends on the deployment: rows (GPU memory below GiB,
    # largest graph batch at TP < 4, at TP >= 4), the first row whose memory bound the GPU is
    # below applies; a pass over more sequences runs eagerly. () = graphs at every batch
    cuda_graph_max_batch_by_gpu_memory: tuple[tuple[float, int, int], ...] = ()
    # CUDA graphs only up to a token count (vLLM V1's max_cudagraph_capture_size,
    # src/costmodel/cudagraph_sizes.py): a pass over more sequences x positions runs eagerly;
    # 0 = no token limit
    cuda_graph_max_tokens: int = 0
    # a drafted step replays two CUDA graphs for its drafts (SGLang's EAGLE worker: the draft
    # extend, and the S - 1 draft decode passes in one): within the graph limit the draft CPU of
    # a step with a draft network of its own is that of min(gamma, 2) passes, not gamma
    draft_passes_one_graph: bool = False
    # kernels a step with a draft network launches eagerly between its graphs (tree build,
    # verification, KV slot bookkeeping), priced per verification at the eager launch cost
    spec_step_eager_kernels: int = 0
    # the measured kernel tables that price this profile's kernels: "<backend>/<version>", a
    # folder pair of AIConfigurator's database (src/kernels/sources.py); "" = none (roofline)
    kernel_tables: str = ""
    # the MoE communication of an attention-DP worker at expert parallelism (ep = G):
    # "alltoall", "nvlink_alltoall" (only where the GPUs are NVLink-connected) or
    # "allgather_reducescatter" (src/attention_dp/moe_comm.py; MoE TP always all-gathers)
    attention_dp_moe_comm: str = "alltoall"
    # that all-gather moves the routed experts' quantized activations (NVFP4, FP8), not BF16
    attention_dp_dispatch_quantized: bool = False

    def cuda_graph_max_batch(self, gpu_memory_gb: float, tp: int) -> int:
        """Largest batch whose passes replay a CUDA graph on this deployment; 0 = no limit."""
        for below_gib, small_tp, large_tp in self.cuda_graph_max_batch_by_gpu_memory:
            if gpu_memory_gb < below_gib:
                return small_tp if tp < 4 else large_tp
        return 0

    @property
    def is_ideal(self) -> bool:
        """True when every overhead term is zero (zero overhead on the profile's kernels)."""
        return (self.step_cpu_fixed_ms == self.step_cpu_per_seq_ms == self.draft_pass_cpu_fixed_ms
                == self.draft_pass_cpu_per_seq_ms == self.ngram_pass_cpu_ms
                == self.rejection_sampling_per_position_ms == self.kv_bookkeeping_per_seq_ms == 0.0
                and self.draft_catchup_positions_per_seq == 0 and not self.scoring_batch_expansion
                and not self.draft_first_pass_covers_verified
                and self.verification_attention_slowdown_factor == 1.0 and self.cuda_graphs)



IDEAL_ENGINE = EngineProfile(
    name="ideal",
    description="zero CPU, launch and scheduling cost on plain unfused kernels (sarathi-serve's, "
                "CUDA graphs): not a lower bound, fused kernels are faster",
    step_cpu_fixed_ms=0.0, step_cpu_per_seq_ms=0.0, draft_pass_cpu_fixed_ms=0.0,
    draft_pass_cpu_per_seq_ms=0.0, ngram_pass_cpu_ms=0.0, rejection_sampling_per_position_ms=0.0,
    kv_bookkeeping_per_seq_ms=0.0, draft_catchup_positions_per_seq=0,
    verification_attention_slowdown_factor=1.0, scoring_batch_expansion=False)


def load_engine_profiles(path: str | Path = ENGINE_PROFILES_FILE,
                         extra_paths: Iterable[str | Path] = ()) -> dict[str, EngineProfile]:
    """_load_engine_profiles, memoised within presets.memo_presets() (a copy of the dict)."""
    extra = tuple(extra_paths)
    key = ("engines", str(path), *map(str, extra))
    return dict(memoised(key, lambda: by_content(
        key, (Path(path), *preset_files(extra)), lambda: _load_engine_profiles(path, extra))))


def _load_engine_profiles(path: str | Path = ENGINE_PROFILES_FILE,
                         extra_paths: Iterable[str | Path] = ()) -> dict[str, EngineProfile]:
    """Engine profiles of a TOML file with one [engines.<name>] table per profile, with the
    [engines.<name>] tables of the built-in preset files (fitted values, e.g. a calibrated eager
    launch cost) and of `extra_paths` (preset files, as --presets takes) merged over them: a
    profile that exists is updated field by field, a new one must give every required field.

    Every EngineProfile field without a default (but `name`) is required; the mechanisms of
    today's engines and the implementation fields may be left out (defaults: off, and sarathi's
    kernels with CUDA graphs). Unknown fields, wrong types, negative values, a fractional catch-up
    count, a slowdown factor or launch-overlap p below 1, an unknown all-reduce, draft kind,
    attention kernel or prefill scheduling raise CostModelInputError.
    """
    data = read_toml(path, "engines", CostModelInputError)
    unknown = sorted(set(data) - {"engines"})
    if unknown:
        raise CostModelInputError(
            "engines", f"{path} has unknown table(s) {', '.join(unknown)}; allowed: engines")
    tables = dict(data.get("engines", {}))
    for extra_path in (*BUILTIN_PRESET_FILES, *map(Path, extra_paths)):
        if extra_path in BUILTIN_PRESET_FILES and not extra_path.is_file():
            continue
        for name, raw in read_toml(extra_path, "presets", CostModelInputError).get(
                "engines", {}).items():
            if not isinstance(raw, dict):
                raise CostModelInputError(f"engines.{name}", "must be a table")
            base = tables.get(name, {})
            tables[name] = {**base, **raw} if isinstance(base, dict) else raw
    wanted = {f.name: f.type for f in fields(EngineProfile) if f.name != "name"}
    defaults = {f.name for f in fields(EngineProfile) if f.default is not MISSING}
    out = {}
    for name, raw in tables.items():
        where = f"engines.{name}"
        if not isinstance(raw, dict):
            raise CostModelInputError(where, "must be a table")
        raw = _with_eager_launch_costs(where, raw, tables)
        extra = sorted(set(raw) - set(wanted))
        if extra:
            raise CostModelInputError(where, f"unknown field(s) {', '.join(extra)}; "
                                             f"allowed: {', '.join(wanted)}")
        missing = [k for k in wanted if k not in raw and k not in defaults]
        if missing:
            raise CostModelInputError(where, f"missing field(s) {', '.join(missing)}")
        values = {}
        for key, kind in wanted.items():
            if key not in raw:
                continue
            if key == "cuda_graph_max_batch_by_gpu_memory":
                values[key] = _graph_batch_rows(f"{where}.{key}", raw[key])
                continue
            if kind.startswith("tuple"):
                values[key] = _draft_kinds(f"{where}.{key}", raw[key])
                continue
            values[key] = coerce(f"{where}.{key}", raw[key], kind, CostModelInputError)
            if not isinstance(values[key], (bool, str)) and values[key] < 0:
                raise CostModelInputError(f"{where}.{key}", f"must be >= 0, got {values[key]}")
        if values.get("allreduce", "nccl") not in ALLREDUCE_IMPLEMENTATIONS:
            raise CostModelInputError(f"{where}.allreduce", f"unknown '{values['allreduce']}'; "
                                      f"allowed: {', '.join(ALLREDUCE_IMPLEMENTATIONS)}")
        if values["verification_attention_slowdown_factor"] < 1.0:
            raise CostModelInputError(f"{where}.verification_attention_slowdown_factor",
                                      "must be >= 1, got "
                                      f"{values['verification_attention_slowdown_factor']}")
        if values.get("launch_overlap_p", 4.0) < 1.0:
            raise CostModelInputError(f"{where}.launch_overlap_p",
                                      f"must be >= 1, got {values['launch_overlap_p']}")
        scheduling = values.get("prefill_scheduling", "chunked")
        if scheduling not in PREFILL_SCHEDULING_CHOICES:
            raise CostModelInputError(f"{where}.prefill_scheduling", f"unknown '{scheduling}'; "
                                      f"allowed: {', '.join(PREFILL_SCHEDULING_CHOICES)}")
        source = values.get("gemm_efficiency_source", "preset")
        if source not in GEMM_EFFICIENCY_SOURCES:
            raise CostModelInputError(f"{where}.gemm_efficiency_source", f"unknown '{source}'; "
                                      f"allowed: {', '.join(GEMM_EFFICIENCY_SOURCES)}")
        kernel = values.get("attention_kernel", "roofline")
        if kernel not in ATTENTION_KERNEL_CHOICES:
            raise CostModelInputError(f"{where}.attention_kernel", f"unknown '{kernel}'; allowed: "
                                      f"{', '.join(ATTENTION_KERNEL_CHOICES)}")
        comm = values.get("attention_dp_moe_comm", "alltoall")
        if comm not in ATTENTION_DP_MOE_COMM_CHOICES:
            raise CostModelInputError(f"{where}.attention_dp_moe_comm", f"unknown '{comm}'; "
                                      f"allowed: {', '.join(ATTENTION_DP_MOE_COMM_CHOICES)}")
        tables_of = values.get("kernel_tables", "")
        if tables_of and not KERNEL_TABLES_RE.match(tables_of):
            raise CostModelInputError(f"{where}.kernel_tables", f"bad '{tables_of}'; allowed: "
                                      f"'' or '<backend>/<version>', backend one of "
                                      f"{', '.join(BACKEND_NAMES)} (e.g. 'vllm/0.24.0')")
        out[name] = EngineProfile(name=name, **values)
    return out


LAUNCH_FIELDS = ("cpu_launch_us_per_kernel", "launch_gap_us_per_kernel", "launch_overlap_p")


def _with_eager_launch_costs(where: str, raw: dict, tables: dict) -> dict:
    """raw with the launch fields of the profile its eager_launch_costs_from names filled in."""
    source = raw.get("eager_launch_costs_from", "")
    if not source:
        return raw
    other = tables.get(source) if isinstance(source, str) else None
    if not isinstance(other, dict) or other.get("eager_launch_costs_from"):
        raise CostModelInputError(f"{where}.eager_launch_costs_from", f"unknown '{source}'; "
                                  "allowed: a profile with launch costs of its own: "
                                  + ", ".join(n for n, t in tables.items() if isinstance(t, dict)
                                              and not t.get("eager_launch_costs_from")))
    return {**{k: other[k] for k in LAUNCH_FIELDS if k in other}, **raw}


def _graph_batch_rows(where: str, value) -> tuple[tuple[float, int, int], ...]:
    """The rows of cuda_graph_max_batch_by_gpu_memory: [GiB bound, batch, batch], the bounds
    rising, the batches whole and >= 1."""
    allowed = ("allowed: a list of [GPU memory below GiB, largest graph batch at TP < 4, at "
               "TP >= 4] rows, memory bounds rising, batches whole numbers >= 1")
    rows, last = [], 0.0
    for row in value if isinstance(value, list) else [None]:
        ok = (isinstance(row, list) and len(row) == 3
              and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row))
        if not ok or row[0] <= last or any(v < 1 or v != int(v) for v in row[1:]):
            raise CostModelInputError(where, f"bad row {row!r}; {allowed}")
        last = float(row[0])
        rows.append((last, int(row[1]), int(row[2])))
    return tuple(rows)


def _draft_kinds(where: str, value) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CostModelInputError(where, f"expected a list of strings, got {value!r}")
    bad = sorted(set(value) - set(DRAFT_KINDS))
    if bad:
        raise CostModelInputError(where, f"unknown draft kind(s) {', '.join(bad)}; "
                                         f"allowed: {', '.join(DRAFT_KINDS)}")
    return tuple(value)


def engine_profile(name: str, path: str | Path = ENGINE_PROFILES_FILE,
                   field_name: str = "engine",
                   extra_paths: Iterable[str | Path] = ()) -> EngineProfile:
    """One profile by name; CostModelInputError naming `field_name` and the known ones if absent."""
    profiles = load_engine_profiles(path, extra_paths)
    if name not in profiles:
        raise CostModelInputError(field_name, f"unknown engine profile '{name}'; known: "
                                              f"{', '.join(sorted(profiles))}")
    return profiles[name]
