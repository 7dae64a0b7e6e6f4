"""Number formats of weights and KV cache: bytes per value and the tensor-core rate a GEMM gets.

A model preset names a format per component (ModelSpec.weight_format for attention, dense FFN and
shared experts; expert_weight_format for the routed experts; kv_cache_format for the KV cache);
embeddings, the LM head and MoE routers stay BF16 (every checkpoint below lists them in
`modules_to_not_convert` / `ignored_layers`). A GPU preset gives the dense tensor-core peak of
each low-precision class it has (GpuSpec.dense_fp8_tflops, dense_fp4_tflops) and the formats it
runs by upcasting to BF16 in a weight-only kernel (GpuSpec.weight_only_formats).

    bytes of a matrix      = values x FORMATS[f].bytes_per_value  (scales included)
    GEMM peak FLOP/s       = the GPU's peak of the format's tensor-core class where it has one
                             (W8A8 / W4A4), else the dense BF16 peak where the GPU lists the
                             format as weight-only (the weights are upcast, the bytes stay the
                             format's); any other pair (format, GPU) is refused
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NumberFormat:
    """One storage format of weights or KV cache."""

    name: str
    bytes_per_value: float  # storage per value, block scales included
    tensor_core: str  # tensor-core class a GEMM with these weights runs on natively
    source: str


FORMATS = {
    "bf16": NumberFormat("bf16", 2.0, "bf16", "BF16: 16 bits per value"),
    "fp8": NumberFormat(
        "fp8", 1.0, "fp8",
        "FP8 E4M3 with one FP32 scale per tensor or per output channel (negligible): 1 byte"),
    "fp8-block": NumberFormat(
        "fp8-block", 1.0 + 4.0 / (128 * 128), "fp8",
        "FP8 E4M3 with one FP32 scale per 128 x 128 block, as DeepSeek-V3 ships it "
        "(config.json quantization_config: fmt e4m3, weight_block_size [128, 128]) and Qwen3 "
        "FP8 checkpoints: 1 + 4 / 16384 bytes"),
    "mxfp4": NumberFormat(
        "mxfp4", 0.5 + 1.0 / 32, "fp4",
        "OCP Microscaling MXFP4: E2M1 values, one E8M0 (8-bit) scale per block of 32 values: "
        "4.25 bits (OCP MX spec v1.0; gpt-oss experts, config.json quant_method mxfp4)"),
    "nvfp4": NumberFormat(
        "nvfp4", 0.5 + 1.0 / 16, "fp4",
        "NVIDIA NVFP4: E2M1 values, one FP8 E4M3 scale per block of 16 values (+ one FP32 scale "
        "per tensor, negligible): 4.5 bits (NVIDIA Blackwell architecture technical brief)"),
}
WEIGHT_FORMATS = tuple(FORMATS)
KV_CACHE_FORMATS = ("bf16", "fp8")  # vLLM/SGLang --kv-cache-dtype auto / fp8 (E4M3)


def format_bytes(name: str) -> float:
    """Bytes per value of a format (KeyError on an unknown name: presets check names first)."""
    return FORMATS[name].bytes_per_value


def gemm_peak_flops_per_s(gpu, fmt: str) -> float:
    """Dense peak FLOP/s of a GEMM whose weights are in `fmt` on `gpu` (see the module docstring);
    ValueError with the allowed formats where the GPU cannot run it."""
    tc = FORMATS[fmt].tensor_core
    if tc == "bf16":
        return gpu.flops_per_s
    peak = {"fp8": gpu.dense_fp8_tflops, "fp4": gpu.dense_fp4_tflops}[tc]
    if peak:
        return peak * 1e12
    if fmt in runnable_weight_formats(gpu):
        return gpu.flops_per_s  # weight-only kernel: upcast to BF16 in the GEMM's prologue
    raise ValueError(fmt)


def runnable_weight_formats(gpu) -> tuple[str, ...]:
    """Weight formats the GPU runs: BF16, those of its low-precision tensor-core classes, and the
    weight-only (upcasting) formats its preset lists."""
    classes = {"bf16"} | {c for c, peak in (("fp8", gpu.dense_fp8_tflops),
                                            ("fp4", gpu.dense_fp4_tflops)) if peak}
    listed = {s.strip() for s in (gpu.weight_only_formats or "").split(",") if s.strip()}
    return tuple(f for f, spec in FORMATS.items() if spec.tensor_core in classes or f in listed)
