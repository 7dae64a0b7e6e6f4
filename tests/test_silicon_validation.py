"""The silicon validation (src/validation/): row mapping and refusals, a host fit that reads
only h100_sxm rows, the error formula, determinism, and the command's bad input."""
import math

import pandas as pd
import pytest

from src.validation import host_fit
from src.validation.silicon import relative_error, summary, table_row
from src.validation.silicon_rows import SiliconCase, load_rows, map_row, reason_kind

ENGINES = {"vllm-v1", "sglang"}  # trtllm left out: its refusal is tested


def _row(**changes):
    row = {"id": "x", "system": "h200_sxm", "backend": "vllm", "backend_version": "0.11.0",
           "model_path": "meta-llama/Llama-3.1-70B", "precision": "fp8", "mode": "agg",
           "isl": 1024, "osl": 1024, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
           "batch_size": 16.0, "tp_size": 4.0, "pp_size": 1.0, "attention_dp_size": 1.0,
           "moe_tp_size": 4.0, "moe_ep_size": 1.0, "silicon_ttft_ms": 100.0,
           "silicon_tpot_ms": 20.0}
    row.update(changes)
    return pd.Series(row)


def test_a_row_maps_to_the_projects_inputs():
    case = map_row(_row(), ENGINES)
    assert isinstance(case, SiliconCase)
    assert (case.gpu, case.engine, case.tp, case.ep, case.weight_format, case.isl, case.osl,
            case.concurrency) == ("h200", "vllm-v1", 4, 1, "fp8", 1024, 1024, 16)
    assert case.expert_weight_format == ""  # a dense model has no experts


def test_gpt_oss_fp4_rows_run_the_checkpoints_mxfp4_experts():
    case = map_row(_row(model_path="openai/gpt-oss-120b", precision="fp4",
                        gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4"), ENGINES)
    assert isinstance(case, SiliconCase) and case.expert_weight_format == "mxfp4"


@pytest.mark.parametrize("changes, kind", [
    ({"system": "h20"}, "unknown GPU"),
    ({"backend": "trtllm"}, "no engine profile"),
    ({"pp_size": 2.0}, "pp>1"),
    ({"attention_dp_size": 4.0}, "attention DP"),
    ({"gemm_quant_mode": "int4_wo", "moe_quant_mode": "int4_wo"}, "unsupported quant"),
    ({"gemm_quant_mode": "nvfp4", "system": "h100_sxm"}, "unsupported quant"),
    ({"model_path": "MiniMaxAI/MiniMax-M2.5"}, "unknown model"),
])
def test_refusals_name_their_reason(changes, kind):
    out = map_row(_row(**changes), ENGINES)
    assert isinstance(out, str) and reason_kind(out) == kind


def test_the_shipped_csv_has_its_agg_rows():
    rows = load_rows()
    assert len(rows) == 3619 and set(rows["mode"]) == {"agg"}


def _case(system, row_id, tpot=10.0):
    return SiliconCase(row_id=row_id, system=system, backend="vllm", gpu="h100-sxm",
                       model="m", engine="vllm-v1", tp=1, ep=1, weight_format="fp8",
                       expert_weight_format="", isl=1, osl=2, concurrency=1,
                       measured_tpot_ms=tpot, measured_ttft_ms=1.0)


def test_the_fit_reads_only_h100_rows_and_finds_the_minimum():
    cases = [_case("h100_sxm", "a"), _case("h200_sxm", "b"), _case("b200_sxm", "c"),
             _case("h100_sxm", "d", tpot=12.0)]
    seen = []

    def fake_predict(case, terms):  # TPOT = measured x exp(fixed - 2): zero error at fixed 2
        seen.append(case.system)
        return {"tpot_ms": case.measured_tpot_ms * math.exp(terms["step_cpu_fixed_ms"] - 2.0),
                "ttft_ms": 1.0}

    fit = host_fit.fit_engine(cases, {"step_cpu_fixed_ms": 0.97, "step_cpu_per_seq_ms": 0.04},
                              fake_predict)
    assert set(seen) == {"h100_sxm"}
    assert fit["step_cpu_fixed_ms"] == 2.0 and fit["rows"] == 2 and fit["row_ids"] == ["a", "d"]
    assert fit["objective_value"] == 0.0
    assert host_fit.fit_engine([_case("h200_sxm", "b")], {}, fake_predict) == {}


def test_fits_round_trip_through_toml(tmp_path):
    path = tmp_path / "fits.toml"
    host_fit.write_fits({"vllm-v1": {"step_cpu_fixed_ms": 1.5, "step_cpu_per_seq_ms": 0.01,
                                     "rows": 3, "objective": "o", "row_ids": ["a"]}}, path)
    assert host_fit.read_fits(path) == {"vllm-v1": {"step_cpu_fixed_ms": 1.5,
                                                    "step_cpu_per_seq_ms": 0.01}}


def test_error_is_predicted_over_measured_minus_one():
    assert relative_error(11.0, 10.0) == pytest.approx(0.1)
    assert relative_error(9.0, 10.0) == pytest.approx(-0.1)
    assert math.isnan(relative_error(1.0, 0.0))
    row = _row()
    out = table_row(row, map_row(row, ENGINES), {"tpot_ms": 15.0, "ttft_ms": 150.0})
    assert out["tpot_error"] == pytest.approx(-0.25) and out["ttft_error"] == pytest.approx(0.5)
    s = summary(pd.DataFrame([out, table_row(_row(system="b300_sxm"), "unknown GPU: b300", None)]))
    assert s.set_index("system").loc["h200_sxm", "tpot_median_abs_error"] == pytest.approx(0.25)
    assert s.set_index("system").loc["b300_sxm", "coverage"] == 0.0


def test_a_prediction_is_deterministic_and_close_to_the_step_time():
    from src.validation.silicon_serve import predict
    case = map_row(_row(system="h100_sxm", batch_size=4.0, osl=128, isl=128), ENGINES)
    first, second = predict(case), predict(case)
    assert first == second
    assert 0 < first["tpot_ms"] < 100 and first["ttft_ms"] > 0


def test_an_unknown_system_is_refused_in_one_line(capsys):
    from tests.helpers import run_main
    done = run_main(capsys, ["silicon-validate", "--systems", "h999"])
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--systems" in done.stderr
