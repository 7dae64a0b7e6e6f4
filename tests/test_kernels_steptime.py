"""step-time --kernels measured|roofline (src/stepcalc.py over src/kernels/)."""
from __future__ import annotations

import csv
import importlib.util
import io

import pytest

from src import stepcalc
from src.kernels import sources

HAVE_TABLES = (importlib.util.find_spec("aiconfigurator_core") is not None
               and importlib.util.find_spec("pyarrow") is not None)
needs_tables = pytest.mark.skipif(not HAVE_TABLES, reason="aiconfigurator-core is not installed "
                                  "(pip install -r requirements.txt)")
DONE_WHEN = ["--gpu", "h200", "--model", "llama-3.1-8b", "--batch", "64", "--positions", "8",
             "--engine", "vllm-v1"]


@pytest.fixture(autouse=True)
def _cache_in_tmp(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "cache"))


def run(capsys, argv):
    rc = stepcalc.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _csv(out):
    return list(csv.DictReader(io.StringIO(out)))


@needs_tables
def test_the_default_prices_vllm_v1_on_h200_from_vllm_0_24_tables(capsys):
    rc, out, err = run(capsys, DONE_WHEN + ["--csv"])
    assert rc == 0 and err == ""
    (row,) = _csv(out)
    assert list(row) == list(stepcalc.COLUMNS + stepcalc.MEASURED_COLUMNS)
    assert (row["gemm_source"], row["attention_source"]) == ("vllm-0.24.0", "vllm-0.24.0")
    assert row["lm_head_source"] == "roofline"  # n = 128256 is beyond the grid's 65536
    assert 0 < float(row["measured_share"]) < 1
    rc, roof, _ = run(capsys, DONE_WHEN + ["--csv", "--kernels", "roofline"])
    (r,) = _csv(roof)
    # the measured GEMMs run faster than the roofline's 256-512-row efficiency (issue 23)
    assert float(row["layers_non_attention_ms"]) < float(r["layers_non_attention_ms"])
    for k in ("communication_ms", "overhead_ms", "lm_head_ms"):
        assert row[k] == r[k]
    parts = sum(float(row[k]) for k in ("layers_non_attention_ms", "attention_ms", "lm_head_ms",
                                         "communication_ms", "overhead_ms"))
    assert float(row["total_ms"]) == pytest.approx(parts, abs=5e-3)
    rc, table, _ = run(capsys, DONE_WHEN)
    assert "vLLM 0.24.0 (h200_sxm) tables of aiconfigurator-core 0.12.0" in table


def test_roofline_kernels_keep_the_old_table(capsys):
    rc, out, err = run(capsys, DONE_WHEN + ["--csv", "--kernels", "roofline"])
    assert rc == 0 and err == ""
    assert list(_csv(out)[0]) == list(stepcalc.COLUMNS)
    # without --engine nothing names measured kernels: the table as before, no note
    rc, plain, err = run(capsys, DONE_WHEN[:-2])
    assert rc == 0 and err == "" and "kernels:" not in plain


def test_a_gpu_without_tables_prices_from_the_roofline_with_one_stderr_line(capsys):
    argv = ["--gpu", "l4", "--model", "llama-3.1-8b", "--batch", "8",
            "--engine", "vllm-v1", "--csv"]
    rc, out, err = run(capsys, argv)
    assert rc == 0
    assert err == ("note: --kernels: GPU 'l4' has no measured tables (those with: "
                   "a100-80gb-sxm, b200, b300, gb200, gb300, h100-sxm, h200, l40s); priced from "
                   "the roofline\n")
    assert out == run(capsys, argv + ["--kernels", "roofline"])[1]


def test_a_system_without_the_engine_s_version_says_which_versions_it_holds(capsys):
    """A100's system holds vLLM 0.14.0 tables, not the 0.24.0 that vllm-v1 names (kernel_tables
    in engines.toml): priced from the roofline, naming what is there."""
    argv = ["--gpu", "a100-80gb-sxm", "--model", "llama-3.1-8b", "--batch", "8",
            "--engine", "vllm-v1", "--csv"]
    rc, out, err = run(capsys, argv)
    assert rc == 0
    assert err == ("note: --kernels: GPU 'a100-80gb-sxm' has no vLLM 0.24.0 tables (a100_sxm "
                   "holds vllm: 0.14.0); priced from the roofline\n")


def test_kernels_measured_without_a_table_is_one_line_and_exit_2(capsys):
    rc, out, err = run(capsys, ["--gpu", "h200", "--model", "llama-3.1-8b", "--engine",
                                "vllm-2024", "--kernels", "measured"])
    assert (rc, out) == (2, "")
    assert err == ("error: --kernels: measured: engine profile 'vllm-2024' has no measured "
                   "tables (those with: sglang, sglang-spec-v2, trtllm, vllm-v1); allowed: "
                   "roofline\n")


def test_kernels_measured_without_the_package_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setattr(sources, "data_root", lambda: None)
    rc, out, err = run(capsys, DONE_WHEN + ["--kernels", "measured"])
    assert (rc, out) == (2, "")
    assert err == ("error: --kernels: measured: aiconfigurator-core is not installed (pip install "
                   "-r requirements.txt); allowed: roofline\n")


@needs_tables
def test_a_pass_wider_than_a_verification_keeps_the_roofline_attention(capsys):
    from src.kernels.pricing import MAX_DECODE_POSITIONS

    wide = MAX_DECODE_POSITIONS + 1
    argv = DONE_WHEN[:-4] + ["--positions", f"8,{wide}", "--engine", "vllm-v1", "--csv"]
    rc, out, _ = run(capsys, argv)
    assert rc == 0
    assert [r["attention_source"] for r in _csv(out)] == ["vllm-0.24.0", "roofline"]
    rc, roof, _ = run(capsys, argv + ["--kernels", "roofline"])
    assert _csv(out)[1]["attention_ms"] == _csv(roof)[1]["attention_ms"]


def test_kernel_tables_and_kernel_system_are_checked_where_the_presets_load(tmp_path):
    """The engine -> tables and GPU -> system maps are preset data: a bad value is one line naming
    the field and what is allowed."""
    from src.costmodel import CostModelInputError
    from src.costmodel.engines import load_engine_profiles
    from src.costmodel.presets import load_presets

    bad_engine = tmp_path / "e.toml"
    bad_engine.write_text('[engines."vllm-v1"]\nkernel_tables = "tgi/1.0"\n')
    with pytest.raises(CostModelInputError, match=r"engines.vllm-v1.kernel_tables.*vllm, sglang, "
                                                  r"trtllm"):
        load_engine_profiles(extra_paths=[bad_engine])
    bad_gpu = tmp_path / "g.toml"
    bad_gpu.write_text('[gpus.h200]\nkernel_system = "H200 SXM"\n')
    with pytest.raises(CostModelInputError, match=r"gpus.h200.kernel_system"):
        load_presets([bad_gpu])
