"""Where the measured kernel tables are: AIConfigurator's database, named without decoding it.

aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/<table>.parquet (design.md,
"Measured kernels"). This module maps the project's GPU presets to the database's systems and its
engine profiles to the backend version whose tables price their kernels; it imports neither
pyarrow nor aiconfigurator_core (importlib.util.find_spec locates the package without running it).
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from src.costmodel.engines import BACKEND_NAMES, load_engine_profiles
from src.costmodel.presets import load_presets

PACKAGE = "aiconfigurator_core"
DISTRIBUTION = "aiconfigurator-core"
GEMM_TABLE = ("gemm", "gemm_perf.parquet")
DECODE_ATTENTION_TABLE = ("attention", "generation_attention_perf.parquet")
MOE_TABLE = ("moe", "moe_perf.parquet")  # fused routed-expert layers (src/kernels/pass_moe.py)


@dataclass(frozen=True)
class TableSource:
    """One engine version's tables on one system."""

    system: str  # database system folder, e.g. "h200_sxm"
    backend: str  # "vllm", "sglang", "trtllm"
    version: str  # backend version, e.g. "0.24.0"
    engine_name: str  # printed, e.g. "vLLM"
    root: Path  # <package>/systems/data

    def path(self, table: tuple[str, str]) -> Path:
        op, file = table
        return self.root / self.system / op / self.backend / self.version / file

    @property
    def label(self) -> str:
        """e.g. 'vLLM 0.24.0 (h200_sxm)'."""
        return f"{self.engine_name} {self.version} ({self.system})"


@lru_cache(maxsize=1)
def data_root() -> Path | None:
    """<aiconfigurator_core>/systems/data, or None where the package is not installed."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0]) / "systems" / "data"
    return root if root.is_dir() else None


def package_version() -> str:
    """The installed aiconfigurator-core version ('' where absent): part of every cache key."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return ""


def printed_name(src: TableSource) -> str:
    return f"{src.engine_name} {src.version}"


def table_source(gpu_id: str, engine_name: str | None,
                 extra_paths: Iterable[str] = ()) -> tuple[TableSource | None, str]:
    """(the tables of `engine_name` on `gpu_id`, "") or (None, why there are none). The GPU's
    kernel_system and the profile's kernel_tables come from the presets (built-in files, then
    `extra_paths`, as --presets takes them)."""
    if engine_name is None:
        return None, "no --engine names an engine whose kernels were measured"
    engines = load_engine_profiles(extra_paths=tuple(extra_paths))
    with_tables = sorted(n for n, p in engines.items() if p.kernel_tables)
    profile = engines.get(engine_name)
    if profile is None or not profile.kernel_tables:
        return None, (f"engine profile '{engine_name}' has no measured tables (those with: "
                      f"{', '.join(with_tables)})")
    gpus = load_presets(tuple(extra_paths)).gpus
    gpu = gpus.get(gpu_id)
    if gpu is None or not gpu.kernel_system:
        return None, (f"GPU '{gpu_id}' has no measured tables (those with: "
                      f"{', '.join(sorted(g for g, s in gpus.items() if s.kernel_system))})")
    return tables_of(gpu, profile)


def tables_of(gpu, profile) -> tuple[TableSource | None, str]:
    """(the tables of engine profile `profile` on GPU preset `gpu`, "") or (None, why there are
    none), from the objects themselves (so a --presets file's GPU or profile is seen too)."""
    if not profile.kernel_tables:
        return None, f"engine profile '{profile.name}' has no measured tables"
    if not gpu.kernel_system:
        return None, f"GPU '{gpu.gpu_id}' has no measured tables"
    root = data_root()
    if root is None:
        return None, f"{DISTRIBUTION} is not installed (pip install -r requirements.txt)"
    backend, version = profile.kernel_tables.split("/")
    src = TableSource(gpu.kernel_system, backend, version, BACKEND_NAMES[backend], root)
    if not src.path(GEMM_TABLE).is_file():
        held = root / src.system / GEMM_TABLE[0] / backend
        versions = sorted(p.name for p in held.iterdir()) if held.is_dir() else []
        return None, (f"GPU '{gpu.gpu_id}' has no {printed_name(src)} tables ({src.system} holds "
                      f"{backend}: {', '.join(versions) or 'none'})")
    return src, ""
