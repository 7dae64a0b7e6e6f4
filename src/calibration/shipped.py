"""The shipped H200 calibration (src/presets/h200_calibration.toml): the measurements in the
repository it is fitted to, and the error per kind of pass its header records, which summary.txt
quotes beside the non-attention fit. Re-derive it with

    python run.py calibrate --measurements measurements/h200-2026-11-29/step_times_ms.csv \\
        --measurements measurements/h200-2026-11-29/prefill_times_ms.csv \\
        --out src/presets/h200_calibration.toml

(tests/test_calibration.py re-fits it and compares with the shipped file).
"""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIT_MEASUREMENTS = ("measurements/h200-2026-11-29/step_times_ms.csv",
                    "measurements/h200-2026-11-29/prefill_times_ms.csv")
PRESET = "src/presets/h200_calibration.toml"
# a header line of command.fit_summary: "<kind>: <n> rows, median |error| <x>%, worst <+y>%"
_LINE = re.compile(r"^# (?P<kind>[^:]+): (?P<n>\d+) rows, median \|error\| (?P<median>[\d.]+%), "
                   r"worst (?P<worst>[+-][\d.]+%)$")


def recorded_pass_errors(path: Path = REPO / PRESET) -> list[tuple[str, int, str, str]]:
    """(kind of pass, rows, median |error|, worst signed error) as the preset's header records
    them, in its order."""
    return [(m["kind"], int(m["n"]), m["median"], m["worst"])
            for m in map(_LINE.match, path.read_text().splitlines()) if m]


def summary_lines(path: Path = REPO / PRESET) -> list[str]:
    """summary.txt's lines on the whole-pass error: per kind of pass, median |error| and the
    worst error, of the H200 calibration on the rows it was fitted to (prefill: checked only)."""
    kinds = recorded_pass_errors(path)
    if not kinds:
        return [f"whole-pass error not recorded (rerun python run.py calibrate, {PRESET})"]
    folder = Path(FIT_MEASUREMENTS[0]).parent
    parts = [f"{kind} {median} ({worst})" for kind, _, median, worst in kinds]
    return [f"whole passes, median |error| (worst error), of the H200's own calibration on the "
            f"measurements it is fitted to ({folder}/):",
            *("  " + "; ".join(parts[i:i + 3]) for i in range(0, len(parts), 3)),
            "  checked on an independent H200 session and published step times: design.md, "
            "'Validation'"]
