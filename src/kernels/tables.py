"""Decoding AIConfigurator's parquet tables into numpy grids, cached.

pyarrow is imported here, on first use only. A decoded table is kept (a) in process
(functools.lru_cache) and (b) on disk as a compact .npz of its columns under the user cache
directory ($XDG_CACHE_HOME or ~/.cache)/batched-spec-bench/kernels-<aiconfigurator-core version>/,
so a later process reads a few hundred kB of numpy instead of decoding parquet (design.md,
"Measured kernels": the cost of each). The cache is only a copy: it is rebuilt when missing,
unreadable or from another package version, and skipped when the directory is not writable.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from src.kernels.sources import (
    DECODE_ATTENTION_TABLE,
    GEMM_TABLE,
    MOE_TABLE,
    TableSource,
    package_version,
)

GEMM_COLUMNS = ("m", "n", "k", "latency")
ATTENTION_COLUMNS = ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                     "window_size", "latency")
# the database's dtype names <- the project's weight / KV-cache formats
GEMM_DTYPE_OF_FORMAT = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block"}
KV_DTYPE_OF_FORMAT = {"bf16": "bfloat16", "fp8": "fp8"}
MOE_COLUMNS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
               "moe_ep_size", "latency")
# the MoE table's dtype names <- the routed experts' weight format: MXFP4 experts run as
# w4a16_mxfp4 (weights upcast to BF16 in the kernel, as gpt-oss runs on Hopper: formats.py's
# weight-only path), the only MXFP4 lane every system's three engines measured
MOE_DTYPE_OF_FORMAT = {"bf16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block",
                       "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4"}


@dataclass(frozen=True)
class GemmGrid:
    """One dtype's GEMM rows on their (m, n, k) grid: latency_ms[i, j, l] at (m[i], n[j], k[l]),
    NaN where the table has no row (or physics.py rejected it)."""

    m: np.ndarray
    n: np.ndarray
    k: np.ndarray
    latency_ms: np.ndarray
    kernel_sources: tuple[str, ...]


@dataclass(frozen=True)
class DecodeAttentionRows:
    """A generation-attention table's rows of one KV dtype and one kernel source, as columns.
    kv_len = isl + step: the tokens the new position attends to (design.md, "Measured kernels")."""

    batch: np.ndarray
    kv_len: np.ndarray
    heads: np.ndarray
    kv_heads: np.ndarray
    head_dim: np.ndarray
    window: np.ndarray
    latency_ms: np.ndarray
    kernel_source: str


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "batched-spec-bench" / f"kernels-{package_version()}"


def _cache_file(src: TableSource, table: tuple[str, str], where: str) -> Path:
    """The .npz of one filtered table, named by the parquet file's path, size and mtime too:
    another copy of the database, or a changed file, gets its own entry."""
    path = src.path(table)
    st = path.stat()
    tag = hashlib.sha1(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    return cache_dir() / (f"{src.system}-{src.backend}-{src.version}-{table[0]}-{where}-"
                          f"{tag[:12]}.npz")


def read_columns(src: TableSource, table: tuple[str, str], columns: tuple[str, ...],
                 filter_column: str, filter_value: str,
                 text_columns: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """`columns` (numbers), kernel_source and `text_columns` (strings) of the rows whose
    filter_column == filter_value, from the .npz cache when it is there, else decoded from the
    parquet file (and cached; strings as codes into their distinct names, no pickle)."""
    texts = ("kernel_source", *text_columns)
    path = _cache_file(src, table, f"{filter_column}={filter_value}")
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {c: z[c] for c in columns}
            for c in texts:
                out[c] = z[f"{c}_names"][z[f"{c}_codes"]]
        return out
    except (OSError, KeyError, ValueError):
        pass
    import pyarrow.parquet as pq  # deferred: ~0.2 s of import, only when decoding

    tb = pq.read_table(src.path(table), columns=[*columns, *texts],
                       filters=[(filter_column, "=", filter_value)])
    out = {c: tb.column(c).to_numpy() for c in columns}
    arrays = {c: out[c] for c in columns}
    for c in texts:
        out[c] = np.asarray(tb.column(c).to_pylist(), dtype=str)
        names, codes = np.unique(out[c], return_inverse=True)
        arrays[f"{c}_names"], arrays[f"{c}_codes"] = names, codes.astype(np.int16)
    _write_cache(path, arrays)
    return out


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:
        pass


@lru_cache(maxsize=32)
def raw_gemm_grid(src: TableSource, dtype: str) -> GemmGrid | None:
    """The measured rows of one GEMM dtype ('bfloat16', 'fp8', 'fp8_block') as a grid, before
    the physics checks; None where the table has no row of that dtype."""
    cols = read_columns(src, GEMM_TABLE, GEMM_COLUMNS, "gemm_dtype", dtype)
    if cols["latency"].size == 0:
        return None
    axes = [np.unique(cols[c]) for c in ("m", "n", "k")]
    lat = np.full(tuple(a.size for a in axes), np.nan)
    idx = tuple(np.searchsorted(a, cols[c]) for a, c in zip(axes, ("m", "n", "k")))
    lat[idx] = cols["latency"]
    return GemmGrid(*axes, latency_ms=lat,
                    kernel_sources=tuple(sorted(set(cols["kernel_source"].tolist()))))


@lru_cache(maxsize=32)
def raw_decode_attention(src: TableSource, kv_dtype: str) -> DecodeAttentionRows | None:
    """The generation-attention rows of one KV dtype ('bfloat16', 'fp8'), of the kernel source
    with the most rows in the table (the engine's default decode kernel on that system: vLLM's
    and SGLang's FA3 on Hopper; the few FA4 / Triton rows are other backends); None where none."""
    path = src.path(DECODE_ATTENTION_TABLE)
    if not path.is_file():
        return None
    cols = read_columns(src, DECODE_ATTENTION_TABLE, ATTENTION_COLUMNS, "kv_cache_dtype",
                        kv_dtype)
    if cols["latency"].size == 0:
        return None
    names, counts = np.unique(cols["kernel_source"], return_counts=True)
    best = str(names[np.argmax(counts)])
    keep = cols["kernel_source"] == best
    c = {k: v[keep] for k, v in cols.items()}
    return DecodeAttentionRows(batch=c["batch_size"], kv_len=c["isl"] + c["step"],
                               heads=c["num_heads"], kv_heads=c["num_key_value_heads"],
                               head_dim=c["head_dim"], window=c["window_size"],
                               latency_ms=c["latency"], kernel_source=best)


@dataclass(frozen=True)
class MoeRows:
    """The fused-MoE table's rows of one routing distribution, as columns (one row: one MoE
    layer's routed experts on one GPU, `tokens` tokens entering the layer)."""

    tokens: np.ndarray
    hidden: np.ndarray
    inter: np.ndarray  # the experts' FFN width before moe_tp splits it
    topk: np.ndarray
    experts: np.ndarray
    moe_tp: np.ndarray
    moe_ep: np.ndarray
    dtype: np.ndarray  # str: "bfloat16", "fp8", "fp8_block", "w4a16_mxfp4", "nvfp4", ...
    kernel_source: np.ndarray  # str
    latency_ms: np.ndarray


@lru_cache(maxsize=32)
def raw_moe_rows(src: TableSource, distribution: str) -> MoeRows | None:
    """The MoE table's rows of one routing distribution ('balanced', 'power_law_1.2', ...);
    None where the engine version has no MoE table on the system or no row of it."""
    if not src.path(MOE_TABLE).is_file():
        return None
    c = read_columns(src, MOE_TABLE, MOE_COLUMNS, "distribution", distribution,
                     text_columns=("moe_dtype",))
    if c["latency"].size == 0:
        return None
    return MoeRows(c["num_tokens"], c["hidden_size"], c["inter_size"], c["topk"],
                   c["num_experts"], c["moe_tp_size"], c["moe_ep_size"], c["moe_dtype"],
                   c["kernel_source"], c["latency"].astype(float))
