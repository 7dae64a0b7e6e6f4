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

PACKAGE = "aiconfigurator_core"
DISTRIBUTION = "aiconfigurator-core"
# the project's GPU preset ids (src/presets/gpus.toml) -> the database's system folders
SYSTEM_OF_GPU = {"h100-sxm": "h100_sxm", "h200": "h200_sxm"}
# engine profiles (src/presets/engines.toml) -> (backend folder, version, its printed name);
# the profiles whose structure is vLLM V1's / SGLang's take that engine's newest tables
TABLES_OF_ENGINE = {
    "vllm-v1": ("vllm", "0.24.0", "vLLM"),
    "sglang": ("sglang", "0.5.14", "SGLang"),
    "sglang-spec-v2": ("sglang", "0.5.14", "SGLang"),
}
GEMM_TABLE = ("gemm", "gemm_perf.parquet")
DECODE_ATTENTION_TABLE = ("attention", "generation_attention_perf.parquet")


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


def table_source(gpu_id: str, engine_name: str | None) -> tuple[TableSource | None, str]:
    """(the tables of `engine_name` on `gpu_id`, "") or (None, why there are none)."""
    if engine_name is None:
        return None, "no --engine names an engine whose kernels were measured"
    if engine_name not in TABLES_OF_ENGINE:
        return None, (f"engine profile '{engine_name}' has no measured tables (those with: "
                      f"{', '.join(sorted(TABLES_OF_ENGINE))})")
    if gpu_id not in SYSTEM_OF_GPU:
        return None, (f"GPU '{gpu_id}' has no measured tables (those with: "
                      f"{', '.join(sorted(SYSTEM_OF_GPU))})")
    root = data_root()
    if root is None:
        return None, f"{DISTRIBUTION} is not installed (pip install -r requirements.txt)"
    backend, version, printed = TABLES_OF_ENGINE[engine_name]
    src = TableSource(SYSTEM_OF_GPU[gpu_id], backend, version, printed, root)
    if not src.path(GEMM_TABLE).is_file():
        return None, f"{src.path(GEMM_TABLE)} is missing"
    return src, ""
