"""Step-time models: how long one forward pass of the target or the draft takes.

The engine loop (src/serving.py) never computes a time itself; it asks a cost model, through the
two methods of the `CostModel` protocol (flat.py), for the time of one target pass and of gamma
draft passes. Files, one idea each:

    flat.py      the CostModel protocol and the flat reference model (1 time unit per pass)
    presets.py   GPU, model and fitted-parameter presets (src/presets/*.toml), input checks
    roofline.py  GPU physics of one forward pass (smooth roofline per kernel)
    memory.py    whether weights and KV cache fit in GPU memory
    engines.py   engine overhead profiles (src/presets/engines.toml)
    allreduce.py tensor-parallel all-reduce: NCCL and vLLM's / SGLang's custom kernels
    attention.py attention kernels as tiles of work on the GPU's multiprocessors
    hardware.py  HardwareCostModel: physics + engine overhead, the hardware CostModel
    passload.py  PassLoad and StepBreakdown, the value types of its per-step calls
    drafts.py    draft kinds (model, eagle, eagle3, mtp, ngram, self) and memory footprints
    moe.py       Mixture-of-Experts routing: distinct experts a pass touches
    formats.py   number formats (BF16, FP8, FP8 block, MXFP4, NVFP4) and tensor-core rates
    shapes.py    shapes of MoE, MLA, sliding-window and EAGLE-3 models (GEMMs, params, KV)
    variants.py  pass coefficients of those shapes (the hook in roofline.pass_coefficients)

Every public name is importable from `src.costmodel`.
"""
from src.costmodel.allreduce import (
    ALLREDUCE_IMPLEMENTATIONS,
    CUSTOM_ALLREDUCE_MAX_BYTES,
    AllReduceCost,
    CustomAllReduceParams,
    allreduce_coefficients,
    allreduce_cost,
    custom_allreduce_supported,
    load_custom_allreduce,
)
from src.costmodel.drafts import DRAFT_KIND_FAMILY, DraftSpec
from src.costmodel.engines import (
    DRAFT_KINDS,
    ENGINE_PROFILES_FILE,
    IDEAL_ENGINE,
    EngineProfile,
    engine_profile,
    load_engine_profiles,
)
from src.costmodel.flat import CostModel, FlatCostModel
from src.costmodel.formats import FORMATS, KV_CACHE_FORMATS, WEIGHT_FORMATS, NumberFormat
from src.costmodel.hardware import HardwareCostModel
from src.costmodel.memory import memory_needed_bytes, memory_usable_bytes, raise_does_not_fit
from src.costmodel.moe import (
    DEFAULT_ROUTING_LOCALITY,
    ROUTING_MODELS,
    expected_distinct_experts,
    simulate_distinct_experts,
)
from src.costmodel.passload import PassLoad, StepBreakdown
from src.costmodel.presets import (
    BUILTIN_PRESET_FILES,
    BYTES_PER_VALUE,
    PRESETS_DIR,
    AllReduceFit,
    CostModelInputError,
    CostModelParams,
    GpuSpec,
    ModelSpec,
    Presets,
    check_int,
    check_tp,
    load_presets,
)
from src.costmodel.roofline import (
    ATTENTION_KERNELS_PER_LAYER,
    KERNELS_PER_LAYER_NON_ATTENTION,
    LM_HEAD_KERNELS,
    PassBreakdown,
    PassCoefficients,
    attention_terms_s,
    forward_pass_breakdown,
    kernel_fixed_s,
    non_attention_forward_ms,
    pass_coefficients,
    pass_components_s,
    pass_time_table_ms,
)

__all__ = [
    "DEFAULT_ROUTING_LOCALITY", "DRAFT_KIND_FAMILY", "FORMATS", "KV_CACHE_FORMATS",
    "NumberFormat", "PassLoad", "ROUTING_MODELS", "WEIGHT_FORMATS", "expected_distinct_experts",
    "simulate_distinct_experts",
    "ALLREDUCE_IMPLEMENTATIONS", "CUSTOM_ALLREDUCE_MAX_BYTES", "AllReduceCost",
    "CustomAllReduceParams", "allreduce_cost", "custom_allreduce_supported",
    "load_custom_allreduce",
    "ATTENTION_KERNELS_PER_LAYER", "BUILTIN_PRESET_FILES", "BYTES_PER_VALUE", "DRAFT_KINDS",
    "ENGINE_PROFILES_FILE", "IDEAL_ENGINE", "KERNELS_PER_LAYER_NON_ATTENTION",
    "LM_HEAD_KERNELS", "PRESETS_DIR", "AllReduceFit", "CostModel", "CostModelInputError",
    "CostModelParams", "DraftSpec", "EngineProfile", "FlatCostModel", "GpuSpec",
    "HardwareCostModel", "ModelSpec", "PassBreakdown", "PassCoefficients", "Presets",
    "StepBreakdown", "allreduce_coefficients", "attention_terms_s", "check_int", "check_tp",
    "engine_profile", "forward_pass_breakdown", "kernel_fixed_s", "load_engine_profiles",
    "load_presets", "memory_needed_bytes", "memory_usable_bytes", "non_attention_forward_ms",
    "pass_coefficients", "pass_components_s", "pass_time_table_ms", "raise_does_not_fit",
]
