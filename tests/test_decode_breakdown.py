"""scripts/decode_breakdown.py: its parts of a disaggregated row's decode step add up to the step
the validation prices (DecodeWorker.step_ms), so the printed split hides nothing."""
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

ROW = "dsr1_b200_trtllm_fp4_disagg_1024x1024_c2192_cfg346"  # decode 2 x (tp 1, dp 8, ep 8)


@pytest.fixture(scope="module")
def worker():
    import decode_breakdown as db

    from src.attention_dp.worker import DecodeWorker
    _, (scenario, disagg, *_rest) = db._mapped(ROW)
    dec = disagg.decode
    cost = replace(scenario, tp=dec.gpus_per_worker, ep=dec.ep).cost_model()
    return DecodeWorker(cost, dec)


def test_parts_add_up_to_the_step(worker):
    import decode_breakdown as db
    N, ctx = 300, 1382.0
    p = db.parts(worker, N, ctx)
    d = p["dp"]
    assert d["rank requests n"] == np.ceil(N / worker.shape.dp)
    terms = sum(v for k, v in d.items() if k[0] in "+-")
    assert terms == pytest.approx(d["correction (sum)"], rel=1e-9, abs=1e-9)
    # the engine overhead of the DP step (host CPU over the rank's n) replaces the TP-G pass's
    assert p["tp_g_physics_ms"] + d["correction (sum)"] + p["dp_overhead_ms"] == pytest.approx(
        p["step_ms"], rel=1e-9)
    assert 0.0 <= p["dp_overhead_ms"] <= p["tp_g_overhead_ms"]
    assert p["tp_g_step_ms"] == pytest.approx(p["tp_g_physics_ms"] + p["tp_g_overhead_ms"])
    # the MoE layer is priced from the measured table at this key, above its roofline here
    key, _, _, measured, roofline, priced = p["moe"]
    assert priced and key[-2:] == (1, 8) and measured > roofline > 0


def test_a_dp1_worker_has_no_correction():
    import decode_breakdown as db

    from src.attention_dp.worker import DecodeWorker
    _, (scenario, disagg, *_rest) = db._mapped("dsr1_b200_trtllm_fp8_disagg_8192x1024_c128_cfg553")
    dec = disagg.decode
    assert dec.dp == 1
    w = DecodeWorker(replace(scenario, tp=dec.gpus_per_worker, ep=dec.ep).cost_model(), dec)
    p = db.parts(w, 32, 7832.0)
    assert "dp" not in p and p["step_ms"] == pytest.approx(p["tp_g_step_ms"], rel=1e-12)
