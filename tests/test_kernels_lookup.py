"""Measured kernel lookups (src/kernels/): grid points, interpolation, physics checks."""
from __future__ import annotations

import numpy as np
import pytest

from src.kernels.grid import interpolate

pytest.importorskip("aiconfigurator_core",
                    reason="aiconfigurator-core is not installed (pip install -r requirements.txt)")
pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow (aiconfigurator-core's dependency) "
                         "is not installed")

from src.costmodel import load_presets  # noqa: E402
from src.kernels.measured import MeasuredKernels  # noqa: E402
from src.kernels.physics import gemm_roofline_ms  # noqa: E402
from src.kernels.pricing import gpu_peaks  # noqa: E402
from src.kernels.sources import (  # noqa: E402
    DECODE_ATTENTION_TABLE,
    GEMM_TABLE,
    TableSource,
    table_source,
)


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache"))


def _h200():
    src, why = table_source("h200", "vllm-v1")
    assert src is not None, why
    return src, MeasuredKernels(src, gpu_peaks(load_presets().gpu("h200")))


def _row(path, **eq):
    tb = pq.read_table(path, filters=[(k, "=", v) for k, v in eq.items()])
    (latency,) = tb.column("latency").to_pylist()
    return latency


def test_a_grid_point_returns_the_measured_row():
    src, k = _h200()
    want = _row(src.path(GEMM_TABLE), gemm_dtype="bfloat16", m=256, n=4096, k=4096)
    assert k.gemm_ms(256, 4096, 4096, "bfloat16") == want
    # decode attention: kv_len = isl (1) + step
    want = _row(src.path(DECODE_ATTENTION_TABLE), kv_cache_dtype="bfloat16", batch_size=64,
                step=2047, num_heads=32, num_key_value_heads=8, head_dim=128, window_size=0,
                kernel_source="vllm_flash_attn_fa3")
    assert k.decode_attention_ms(64, 2048, 32, 8, 128, "bfloat16") == want


def test_between_rows_the_lookup_is_linear_and_monotone_where_the_rows_are():
    src, k = _h200()
    lo = _row(src.path(GEMM_TABLE), gemm_dtype="bfloat16", m=257, n=4096, k=4096)
    hi = _row(src.path(GEMM_TABLE), gemm_dtype="bfloat16", m=512, n=4096, k=4096)
    assert lo < hi  # the rows rise with m here
    w = (384 - 257) / (512 - 257)
    assert k.gemm_ms(384, 4096, 4096) == pytest.approx((1 - w) * lo + w * hi, rel=1e-12)
    sweep = [k.gemm_ms(m, 4096, 4096) for m in range(257, 513, 5)]
    assert all(a <= b for a, b in zip(sweep, sweep[1:]))
    # n between the grid's 16384 and 51200 (Llama-3.1-8B's gate/up 28672): between the rows
    n_lo, n_hi = k.gemm_ms(256, 16384, 4096), k.gemm_ms(256, 51200, 4096)
    assert n_lo < k.gemm_ms(256, 28672, 4096) < n_hi
    kv = [k.decode_attention_ms(64, s, 32, 8, 128) for s in range(1024, 4097, 256)]
    assert all(a <= b for a, b in zip(kv, kv[1:]))


def test_off_the_grid_is_none():
    _, k = _h200()
    assert k.gemm_ms(512, 128256, 4096) is None  # LM head: n beyond the grid's 65536
    assert k.gemm_ms(40000, 4096, 4096) is None
    assert k.decode_attention_ms(64, 2048, 32, 8, 100) is None  # no such head dim
    assert k.decode_attention_ms(4096, 2048, 32, 8, 128) is None


def test_multilinear_rule_reproduces_an_affine_kernel_time_exactly():
    axes = [np.array([1.0, 2.0, 8.0]), np.array([10.0, 20.0]), np.array([3.0, 5.0, 9.0])]
    M, N, K = np.meshgrid(*axes, indexing="ij")
    f = lambda m, n, k: 0.5 + 2.0 * m + 0.1 * n + 0.3 * k + 0.01 * m * n  # noqa: E731
    assert interpolate(axes, f(M, N, K), (5.0, 13.0, 4.0)) == pytest.approx(f(5.0, 13.0, 4.0))
    values = f(M, N, K)
    values[2, 1, 1] = np.nan  # a missing or rejected corner: no price from this cell
    assert interpolate(axes, values, (5.0, 13.0, 4.0)) is None
    assert interpolate(axes, values, (1.5, 13.0, 4.0)) is not None


def _planted_table(root, rows):
    import pyarrow as pa

    path = TableSource("h200_sxm", "vllm", "0.24.0", "vLLM", root).path(GEMM_TABLE)
    path.parent.mkdir(parents=True)
    cols = {c: [r[i] for r in rows] for i, c in enumerate(("gemm_dtype", "m", "n", "k",
                                                           "latency"))}
    cols["kernel_source"] = ["planted"] * len(rows)
    pq.write_table(pa.table(cols), path)
    return TableSource("h200_sxm", "vllm", "0.24.0", "vLLM", root)


def test_a_planted_broken_row_is_detected_and_not_used(tmp_path):
    peaks = gpu_peaks(load_presets().gpu("h200"))
    grid_pts = [(m, n, kk) for m in (256, 512) for n in (4096, 8192) for kk in (4096, 8192)]
    bf16 = {p: 3.0 * float(gemm_roofline_ms(*p, "bfloat16", peaks)) for p in grid_pts}
    fp8 = {p: 0.8 * bf16[p] for p in grid_pts}
    fp8[(512, 8192, 8192)] = 6.0 * bf16[(512, 8192, 8192)]  # vLLM's fp8_block artefact, planted
    bf16[(256, 4096, 4096)] = 0.5 * float(gemm_roofline_ms(256, 4096, 4096, "bfloat16", peaks))
    rows = [("bfloat16", *p, v) for p, v in bf16.items()]
    rows += [("fp8_block", *p, v) for p, v in fp8.items()]
    k = MeasuredKernels(_planted_table(tmp_path, rows), peaks)
    _, rejected = k.gemm_grid("fp8_block")
    assert [(r.rule.split(" the ")[0], r.rows) for r in rejected] == [("slower than 2x", 1)]
    assert k.gemm_ms(512, 8192, 8192, "fp8_block") is None
    assert k.gemm_ms(400, 6000, 6000, "fp8_block") is None  # its cell needs the planted row
    assert k.gemm_ms(512, 4096, 4096, "fp8_block") == fp8[(512, 4096, 4096)]
    _, rejected = k.gemm_grid("bfloat16")
    assert [(r.rule, r.rows) for r in rejected] == [
        ("faster than its roofline at peak FLOP/s and bandwidth", 1)]
    assert k.gemm_ms(256, 4096, 4096) is None
    assert k.gemm_ms(512, 8192, 8192) == bf16[(512, 8192, 8192)]


def test_the_real_tables_reject_vllms_fp8_block_rows_for_qwen3_30b_shapes():
    _, k = _h200()
    # Qwen3-30B-A3B's QKV (k 2048 -> n 5120) at 64-256 rows: ~85 us, 8-10x the BF16 rows
    for m in (64, 256):
        assert k.gemm_ms(m, 5120, 2048, "bfloat16") is not None
        assert k.gemm_ms(m, 5120, 2048, "fp8_block") is None


@pytest.mark.parametrize("system,backend,version,table,kv", [
    ("h100_sxm", "trtllm", "1.3.0rc20", GEMM_TABLE, None),
    ("h200_sxm", "sglang", "0.5.14", DECODE_ATTENTION_TABLE, "fa3"),
])
def test_the_same_reader_serves_sglang_and_tensorrt_llm(system, backend, version, table, kv):
    src0, _ = _h200()
    src = TableSource(system, backend, version, backend, src0.root)
    k = MeasuredKernels(src, gpu_peaks(load_presets().gpu("h200")))
    if kv is None:
        want = _row(src.path(table), gemm_dtype="bfloat16", m=64, n=6144, k=4096)
        assert k.gemm_ms(64, 6144, 4096) == want
    else:
        want = _row(src.path(table), kv_cache_dtype="bfloat16", batch_size=16, step=1023,
                    num_heads=32, num_key_value_heads=8, head_dim=128, window_size=0,
                    kernel_source=kv)
        assert k.decode_attention_ms(16, 1024, 32, 8, 128) == want
