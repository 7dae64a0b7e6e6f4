"""The environment a measurement came from, written beside the CSV as JSON.

GPU name, memory and compute capability from PyTorch; versions of Python, PyTorch, CUDA and
cuDNN; clocks, power and temperature from `nvidia-smi` where it exists (before and after the
run: long runs can be power- or thermally limited); and two short calibration figures of the
GPU itself, measured here:
  copy_tb_s            device-to-device copy of 1 GiB, bytes read plus written per second
  bf16_matmul_tflops   8192 x 8192 x 8192 BF16 matrix product, 2 n^3 FLOPs per product
"""
from __future__ import annotations

import os
import platform
import subprocess

import torch

SMI_FIELDS = ("name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "clocks.max.sm",
              "clocks.max.mem", "power.draw", "power.limit", "temperature.gpu")


def describe(device: torch.device) -> dict:
    """Versions and the device's identity (no timing)."""
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device": str(device),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(gpu=props.name, compute_capability=f"{props.major}.{props.minor}",
                    memory_gib=round(props.total_memory / 1024 ** 3, 2),
                    multiprocessors=props.multi_processor_count)
        uuid = getattr(props, "uuid", None)
        info["gpu_uuid"] = f"GPU-{uuid}" if uuid is not None else None
    else:
        info.update(cpu=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
                    torch_threads=torch.get_num_threads())
    return info


def smi_snapshot(gpu_uuid: str | None) -> dict | str | None:
    """nvidia-smi's clocks (MHz), power (W) and temperature (C) now, or why they are missing."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    if gpu_uuid:
        cmd.append(f"--id={gpu_uuid}")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi not available ({type(exc).__name__})"
    if done.returncode != 0 or not done.stdout.strip():
        return f"nvidia-smi failed: {(done.stderr or done.stdout).strip().splitlines()[:1]}"
    values = [v.strip() for v in done.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(SMI_FIELDS, values))


def gpu_rates(device: torch.device) -> dict:
    """copy_tb_s and bf16_matmul_tflops (module docstring); empty off CUDA."""
    if device.type != "cuda":
        return {}

    def best_ms(run, reps):
        run()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return min(times)

    copy_ms = best_ms(_copy_run(device), 10)
    n = 8192
    mm_ms = best_ms(_matmul_run(device, n), 10)
    torch.cuda.empty_cache()
    return {"copy_tb_s": round(2 * 1024 ** 3 / (copy_ms * 1e-3) / 1e12, 3),
            "bf16_matmul_tflops": round(2 * n ** 3 / (mm_ms * 1e-3) / 1e12, 1)}


def _copy_run(device: torch.device):
    """dst <- src over 1 GiB of BF16."""
    src = torch.empty(1024 ** 3 // 2, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _matmul_run(device: torch.device, n: int):
    """One n x n x n BF16 matrix product."""
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    return lambda: a @ b
