"""The silicon validation (src/validation/): row mapping and refusals, a host fit that reads
only h100_sxm rows, the error formula, determinism, and the command's bad input."""
import math

import pandas as pd
import pytest

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
    ({"attention_dp_size": 4.0}, "attention DP layout"),  # moe_tp 4 x ep 1 is not 16 GPUs
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


def test_empty_attention_dp_and_quant_columns_are_the_defaults():
    # the CSV's older sources leave attention_dp_size and both quant columns empty
    nan = float("nan")
    case = map_row(_row(attention_dp_size=nan, gemm_quant_mode=nan, moe_quant_mode=nan,
                        precision=nan, model_path="Qwen/Qwen3-32B"), ENGINES)
    assert isinstance(case, SiliconCase)
    assert (case.weight_format, case.expert_weight_format) == ("bf16", "")
    out = map_row(_row(attention_dp_size=0.0), ENGINES)  # 0 is not empty: refused
    assert isinstance(out, str) and reason_kind(out) == "attention DP"


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
