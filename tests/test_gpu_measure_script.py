"""scripts/gpu_measure.sh: its plan fits its own wall-clock budget (dry run: no torch needed)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_dry_run_plans_every_run_within_the_budget(tmp_path):
    env = {**os.environ, "MEASURE_DRY_RUN": "1", "OUT": str(tmp_path / "out"),
           "PYTHON": sys.executable}
    done = subprocess.run(["bash", "scripts/gpu_measure.sh"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = re.findall(r"^run (\S+): (\d+) configurations, estimated (\d+) s$", done.stdout, re.M)
    assert [name for name, _, _ in runs] == [
        "forward-grid", "forward-context", "forward-batch", "eager", "attention", "prefill-1",
        "prefill-batch"]
    total = re.search(r"^total: (\d+) configurations, estimated (\d+) s \(wall-clock budget "
                      r"(\d+) s\)$", done.stdout, re.M)
    assert total, done.stdout
    configs, seconds, budget = map(int, total.groups())
    assert configs == sum(int(n) for _, n, _ in runs) and min(int(n) for _, n, _ in runs) > 0
    assert seconds == sum(int(s) for _, _, s in runs)
    assert seconds <= budget  # the plan fits; the budget is the script's hard limit
    assert not list((tmp_path / "out").glob("*.csv"))  # a dry run measures nothing
