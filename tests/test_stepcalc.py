"""Tests of the step-time calculator (src/stepcalc.py)."""
from __future__ import annotations

import csv
import io

import pytest

from src import stepcalc
from src.costmodel import forward_pass_breakdown, load_presets

EXAMPLE = ["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "1", "--batch", "1,8,64",
           "--positions", "1,5", "--context", "2048"]


def run(capsys, argv):
    rc = stepcalc.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_table_has_one_row_per_batch_and_positions(capsys):
    rc, out, err = run(capsys, EXAMPLE)
    assert rc == 0 and err == ""
    lines = out.strip().splitlines()
    assert lines[0].split() == list(stepcalc.COLUMNS)
    assert len(lines) == 1 + 6
    rows = [line.split() for line in lines[1:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("1", "1", "1"), ("1", "5", "5"), ("8", "1", "8"), ("8", "5", "40"), ("64", "1", "64"),
        ("64", "5", "320")]
    bound = stepcalc.COLUMNS.index("bound")
    assert all(r[bound] in ("memory", "compute") for r in rows)
    assert all(r[stepcalc.COLUMNS.index("distinct_experts")] == "-" for r in rows)  # dense
    assert len({len(line) for line in lines}) == 1  # aligned


def test_csv_matches_the_model(capsys):
    rc, out, _ = run(capsys, EXAMPLE + ["--csv"])
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 6 and list(rows[0]) == list(stepcalc.COLUMNS)
    p = load_presets()
    bd = forward_pass_breakdown(p.gpu("h100-sxm"), p.model("llama-3.1-8b"), 1, 8, 5, 2048,
                                p.params, p.allreduce)
    row = rows[3]
    assert float(row["total_ms"]) == pytest.approx(bd.total_ms, abs=1e-3)
    assert float(row["layers_non_attention_ms"]) == pytest.approx(bd.layers_non_attention_ms,
                                                                  abs=1e-3)
    parts = sum(float(row[k]) for k in ("layers_non_attention_ms", "attention_ms", "lm_head_ms",
                                         "communication_ms", "overhead_ms"))
    assert float(row["total_ms"]) == pytest.approx(parts, abs=5e-3)


def test_tp_adds_communication(capsys):
    rc, out, _ = run(capsys, ["--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--tp", "4",
                              "--batch", "16", "--csv"])
    assert rc == 0
    (row,) = csv.DictReader(io.StringIO(out))
    assert float(row["communication_ms"]) > 0


def test_user_presets_file(capsys, tmp_path):
    f = tmp_path / "gpu.toml"
    f.write_text('[gpus."h100-sxm-slow"]\nname = "slow H100"\ndense_bf16_tflops = 989.4\n'
                 'memory_bandwidth_gb_per_s = 1675.0\nmemory_gb = 80.0\n'
                 'interconnect_bidirectional_gb_per_s = 900.0\ninterconnect = "NVLink"\n'
                 'source = "test"\n')
    rc, out, _ = run(capsys, ["--gpu", "h100-sxm-slow", "--model", "llama-3.1-8b", "--csv",
                              "--presets", str(f)])
    assert rc == 0
    slow = float(next(csv.DictReader(io.StringIO(out)))["layers_non_attention_ms"])
    rc, out, _ = run(capsys, ["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--csv"])
    fast = float(next(csv.DictReader(io.StringIO(out)))["layers_non_attention_ms"])
    assert slow > 1.7 * fast


@pytest.mark.parametrize("extra,prefix", [
    (["--gpu", "x100", "--model", "llama-3.1-8b"], "error: --gpu: unknown GPU 'x100'; known: "),
    (["--gpu", "h100-sxm", "--model", "gpt"], "error: --model: unknown model 'gpt'; known: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "3"], "error: --tp: 3 does not "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--tp", "1,2"], "error: --tp: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "0"], "error: --batch: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "x"], "error: --batch: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--positions", "-1"],
     "error: --positions: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--context", "-3"], "error: --context: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-70b"], "error: --tp: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "512", "--context", "8192"],
     "error: --batch/--context: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "turbo"], "error: --engine: "),
    (["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--presets", "/no/such.toml"],
     "error: --presets: "),
])
def test_bad_input_is_one_line_and_exit_2(capsys, extra, prefix):
    rc, out, err = run(capsys, extra)
    assert rc == 2
    assert out == ""
    assert err.startswith(prefix)
    assert err.count("\n") == 1 and "Traceback" not in err


def test_bad_field_in_presets_file(capsys, tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[gpus."h100-sxm"]\nmemroy_gb = 1.0\n')
    rc, _, err = run(capsys, ["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--presets",
                              str(f)])
    assert rc == 2
    assert err.startswith("error: --presets: gpus.h100-sxm: unknown field(s) memroy_gb")
    assert err.count("\n") == 1


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        stepcalc.main(["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--bogus", "1"])
    assert info.value.code == 2


def test_engine_option_reports_that_profiles_overhead(capsys):
    from src.hardware.scenario import default_hardware_scenario

    def overhead(engine):
        assert stepcalc.main(["--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--batch", "64",
                              "--positions", "5",
                     "--context", "1616", "--engine", engine, "--csv"]) == 0
        return float(capsys.readouterr().out.splitlines()[1].split(",")[8])

    assert overhead("ideal") == 0.0
    bd = default_hardware_scenario().cost_model("vllm-2024").step_breakdown(64, 4, 1616)
    assert overhead("vllm-2024") == pytest.approx(bd.verify_overhead_ms, abs=1e-3)


def test_list_shows_every_gpu_model_and_engine_id(capsys):
    from src.config import ConfigError
    from src.costmodel import load_engine_profiles
    from src.costmodel.hf_ids import bundled_ids

    rc, out, err = run(capsys, ["--list"])
    assert rc == 0 and err == ""
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    presets = load_presets()
    ids = set(presets.gpus) | set(presets.models) | set(load_engine_profiles())
    hf_ids = set()  # the bundled Hugging Face ids the cost model runs (tests/test_hf_ids.py)
    for hf_id in bundled_ids():
        try:
            presets.model(hf_id)
            hf_ids.add(hf_id)
        except ConfigError:
            pass
    assert listed == ids | hf_ids and hf_ids


def test_missing_gpu_points_to_list(capsys):
    rc, out, err = run(capsys, ["--model", "llama-3.1-8b"])
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: --gpu: required") and "--list" in err
