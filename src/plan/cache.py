"""Finished capacity searches on disk, so a resumed (or repeated) plan reruns none of them.

A search's result is a pure function of its SearchTask and of the code that computes it, so the
key is the SHA-256 of both: the task's canonical JSON (every field, sorted keys) and the code
version, the SHA-256 of every source and preset file under src/ (any edit there, a cost-model
constant or the engine, starts afresh) except the plan's own report, command line and this file,
which do not change a search's result (a new plot does not rerun the searches), and the installed
aiconfigurator-core version, whose bundled model_configs/ (a pair named by Hugging Face id) and
measured kernel tables are inputs too. One JSON file per
search, OUT/runs/plan-cache/KEY.json, written to a temporary name and renamed: a plan stopped
mid-write leaves a whole file or none.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from src.errors import ConfigError

SRC = Path(__file__).resolve().parents[1]
NOT_IN_RESULT = ("plan/report.py", "plan/cli.py", "plan/cache.py")  # relative to src/


def code_version(root: Path = SRC, package: str | None = None) -> str:
    """SHA-256 over the path and bytes of every .py and .toml file under src/ (sorted) but
    NOT_IN_RESULT, and `package` (default: the installed aiconfigurator-core version, '' where
    absent)."""
    if package is None:
        from src.kernels.sources import package_version

        package = package_version()
    h = hashlib.sha256(f"aiconfigurator-core=={package}\0".encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml")
                       and "__pycache__" not in p.parts
                       and p.relative_to(root).as_posix() not in NOT_IN_RESULT):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def task_key(task, version: str) -> str:
    text = json.dumps({"task": task.canonical(), "code": version}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class SearchCache:
    """get/put of search results by task; `folder` None = no cache."""

    def __init__(self, folder: str | None, version: str):
        self.folder, self.version = folder, version

    def _path(self, task) -> str:
        return os.path.join(self.folder, task_key(task, self.version) + ".json")

    def get(self, task) -> dict | None:
        if self.folder is None:
            return None
        try:
            with open(self._path(task), encoding="utf-8") as f:
                entry = json.load(f)
        except (OSError, ValueError):
            return None  # absent, or not ours: search again
        if entry.get("task") != json.loads(json.dumps(task.canonical())):
            return None
        return entry.get("result")

    def put(self, task, result: dict) -> None:
        """Write one finished search; ConfigError('--out', one line) where the disk refuses (full,
        read-only), with the temporary file removed, so a failed write leaves no debris."""
        if self.folder is None:
            return
        path = self._path(task)
        tmp = f"{path}.{os.getpid()}.tmp"
        text = json.dumps({"task": task.canonical(), "code": self.version, "result": result},
                          sort_keys=True)
        try:
            os.makedirs(self.folder, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as f:
                _write(f, text)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ConfigError("--out", f"could not keep a finished search in {self.folder} "
                                       f"({e.strerror or e}); previous outputs left as they "
                                       "were, finished searches kept") from None


def _write(f, text: str) -> None:
    f.write(text)
