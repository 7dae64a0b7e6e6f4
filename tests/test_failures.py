"""The command line as a user meets it, run as a real process: help text, bad input, and what a run
does when it is interrupted or killed (signals), checked from outside with subprocess."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_py(*argv: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def test_help_never_splits_an_id_across_lines():
    for argv in (["--help"], ["step-time", "--help"]):
        for columns in ("60", "80"):
            text = run_py(*argv, env={"COLUMNS": columns}).stdout
            words = set(text.split())
            for name in ("homogeneous_good", "homogeneous_mid", "heterogeneous", "bimodal",
                         "static_batch", "continuous_refill", "vllm-2024", "configs/example.toml"):
                if name in text.replace("\n", " ").replace(" ", ""):
                    assert any(name in w for w in words), (argv, columns, name)
