"""Tests of `python run.py calibrate` (src/calibration/).

Measured figures: the H200 measurements shipped with the project's calibration data
(h200_step_times_ms.csv, h200_prefill_times_ms.csv in ../shared/calibration/h200); tests that read
them skip when that folder is absent.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from src.calibration import command
from src.calibration.fit import best_of_kernels, calibrate, predict_with
from src.calibration.measurements import REQUIRED_COLUMNS, read_measurements
from src.costmodel import HardwareCostModel, load_engine_profiles, load_presets

REPO = Path(__file__).resolve().parents[1]
H200 = REPO.parent / "shared" / "calibration" / "h200"
STEPS = H200 / "h200_step_times_ms.csv"
PREFILL = H200 / "h200_prefill_times_ms.csv"
needs_h200 = pytest.mark.skipif(not STEPS.is_file(), reason="../shared/calibration/h200 absent")


def _errors(frame: pd.DataFrame) -> pd.Series:
    return (frame["predicted_ms"] / frame["median_ms"] - 1).abs()


@pytest.fixture(scope="module")
def fitted():
    cal, rows, presets = command.run(str(STEPS))
    return cal, rows, presets, command.evaluation(cal, rows, presets)


def _fit(rows):
    presets = load_presets()
    engines = load_engine_profiles()
    return calibrate(rows, presets.gpu("h200"), presets.models, presets.params,
                     engines["pytorch-graphs"], engines["pytorch-eager"])


def _best_forward(cal, rows):
    presets = load_presets()
    fw = rows[(rows["mode"] == "graph") & (rows["what"] == "forward")]
    return best_of_kernels(fw, predict_with(cal, fw, presets.models, presets.params, "best"))


# ---------------------------------------------------------------- the bars
@needs_h200
def test_graph_forward_rows_within_the_bars(fitted):
    # forward rows, pytorch-graphs, the faster kernel per configuration: median <= 5%,
    # worst <= 15%, for each model
    frame = fitted[3]["graph forward"]
    for model, err in _errors(frame).groupby(frame["model"]):
        assert np.median(err) <= 0.05, model
        assert err.max() <= 0.15, model
    assert set(frame["model"]) == {"llama-3.1-8b", "llama-3.2-1b"}


@needs_h200
def test_eager_rows_within_the_bar(fitted):
    err = _errors(fitted[3]["eager forward"])
    assert len(err) == 27 and np.median(err) <= 0.10


@needs_h200
def test_prefill_is_predicted_without_being_fitted(fitted):
    # checked against the prefill measurements (never fitted): median <= 10%, worst <= 25%
    presets = load_presets()
    rows = read_measurements(str(PREFILL), presets.models)
    cal = fitted[0]
    frame = best_of_kernels(rows, predict_with(cal, rows, presets.models, presets.params, "best"))
    err = _errors(frame)
    assert np.median(err) <= 0.10 and err.max() <= 0.25


@needs_h200
def test_shipped_h200_presets_are_the_fit(fitted):
    # src/presets/h200_calibration.toml is calibrate's output on these rows, not typed in
    cal = fitted[0]
    fresh = tomllib.loads(command.preset_toml(cal, STEPS.name, []))
    shipped = tomllib.loads((REPO / "src" / "presets" / "h200_calibration.toml").read_text())
    for table in ("gpus", "attention", "engines"):
        for key, values in fresh[table].items():
            for name, value in (values.items() if table != "attention" else
                                ((f"{k}.{f}", v) for k, fv in values.items()
                                 for f, v in fv.items())):
                got = shipped[table][key]
                for part in name.split("."):
                    got = got[part]
                assert got == pytest.approx(value, rel=1e-4), (table, key, name)


@needs_h200
def test_step_time_agrees_with_measured_rows():
    # the command: step-time --gpu h200 --model llama-3.1-8b --batch 1,64,256
    # --positions 1,5 --context 2048 --engine pytorch-graphs, against the faster kernel's rows
    measured = pd.read_csv(STEPS)
    m = HardwareCostModel.from_presets("h200", "llama-3.1-8b", engine="pytorch-graphs")
    for batch in (1, 64, 256):
        for positions in (1, 5):
            sel = measured[(measured["model"] == "llama-3.1-8b") & (measured["mode"] == "graph")
                           & (measured["what"] == "forward") & (measured["batch"] == batch)
                           & (measured["positions"] == positions) & (measured["context"] == 2048)]
            best = sel["median_ms"].min()
            active = np.ones((1, batch), bool)
            physics, overhead = m.target_pass_parts(active, positions,
                                                    np.full((1, batch), 2048))
            assert float(physics[0] + overhead[0]) == pytest.approx(best, rel=0.10), (
                batch, positions)


# ---------------------------------------------------------------- held-out configurations
@needs_h200
def test_held_out_context_is_predicted():
    # fit without any context-2048 row, predict them: the step-time configurations within 10%,
    # all of them within the bars
    rows = read_measurements(str(STEPS), load_presets().models)
    held = rows["context"] == 2048
    frame = _best_forward(_fit(rows[~held]), rows[held])
    err = _errors(frame)
    assert np.median(err) <= 0.05 and err.max() <= 0.15
    pick = frame[(frame["model"] == "llama-3.1-8b") & frame["batch"].isin([1, 64, 256])
                 & frame["positions"].isin([1, 5])]
    assert len(pick) == 6 and _errors(pick).max() <= 0.10


@needs_h200
def test_held_out_draft_batches_are_predicted():
    # the draft model at batch sizes the fit did not see
    rows = read_measurements(str(STEPS), load_presets().models)
    held = (rows["model"] == "llama-3.2-1b") & rows["batch"].isin([16, 64])
    frame = _best_forward(_fit(rows[~held]), rows[held])
    assert len(frame) == 6 and _errors(frame).max() <= 0.10


# ---------------------------------------------------------------- the command
@needs_h200
def test_calibrate_command_prints_the_fit_and_writes_usable_presets(tmp_path, capsys):
    out = tmp_path / "x.toml"
    assert command.main(["--measurements", str(STEPS), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for needle in ("Fitted parameters:", "graph forward with pytorch-graphs", "llama-3.2-1b",
                   "eager forward with pytorch-eager", "Worst rows"):
        assert needle in text
    presets = load_presets([out])
    assert presets.gpu("h200").gemv_bandwidth_efficiency_fraction is not None
    assert {f.kernel for f in presets.attention if f.gpu_id == "h200"} == {"flash", "cudnn"}
    eager = load_engine_profiles(extra_paths=[out])["pytorch-eager"]
    assert eager.cpu_launch_us_per_kernel > 5 and not eager.cuda_graphs


def _csv(tmp_path, rows, columns=REQUIRED_COLUMNS):
    path = tmp_path / "m.csv"
    pd.DataFrame(rows, columns=list(columns)).to_csv(path, index=False)
    return path


def _bad(tmp_path, capsys, measurements, needle):
    out = tmp_path / "out.toml"
    out.write_text("previous\n")
    assert command.main(["--measurements", str(measurements), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and needle in err, err
    assert out.read_text() == "previous\n"  # nothing written or overwritten
    return err


def test_bad_measurement_files(tmp_path, capsys):
    row = ["llama-3.1-8b", "graph", "forward", "flash", 1, 1, 512, 6.8]
    _bad(tmp_path, capsys, tmp_path / "missing.csv", "--measurements: file not found")
    binary = tmp_path / "b.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    _bad(tmp_path, capsys, binary, "--measurements")
    _bad(tmp_path, capsys, _csv(tmp_path, [row[:-1]], REQUIRED_COLUMNS[:-1]),
         "lacks column(s) median_ms")
    _bad(tmp_path, capsys, _csv(tmp_path, [row[:-1] + [0.0]]), "median_ms (line 2)")
    _bad(tmp_path, capsys, _csv(tmp_path, [row[:-1] + [-1.0]]), "median_ms (line 2)")
    _bad(tmp_path, capsys, _csv(tmp_path, [row[:-1] + ["fast"]]), "'fast' is not a number")
    _bad(tmp_path, capsys, _csv(tmp_path, [row[:4] + [0] + row[5:]]), "batch (line 2)")
    _bad(tmp_path, capsys, _csv(tmp_path, [["gpt-5"] + row[1:]]), "model (line 2): unknown")
    _bad(tmp_path, capsys, _csv(tmp_path, [row, row]), "too few rows to fit")


def test_too_few_rows_names_the_parameter(tmp_path, capsys):
    # batch-1 decode rows only: nothing tells the large-GEMM rate or the small-GEMM bandwidth
    rows = [["llama-3.1-8b", "graph", "forward", "flash", 1, 1, c, 7.0]
            for c in (512, 1024, 2048, 4096)]
    err = _bad(tmp_path, capsys, _csv(tmp_path, rows), "too few rows to fit")
    assert "small_gemm_bandwidth_efficiency_fraction" in err


def test_bad_flags(tmp_path, capsys):
    assert command.main(["--measurements", "x.csv", "--gpu", "tpu-v9"]) == 2
    assert "--gpu: unknown GPU 'tpu-v9'" in capsys.readouterr().err
    assert command.main(["--measurements", "x.csv", "--out", str(tmp_path / "no" / "x.toml")]) == 2
    assert "--out: cannot write" in capsys.readouterr().err
