"""Disaggregated prefill/decode (src/disagg/): the [disagg] table's checks, the KV transfer, the
decode pool's steps against the aggregated replica's, and the closed-loop steady state."""
import math

import numpy as np
import pytest

from src.attention_dp.worker import DecodeWorker
from src.config import ConfigError
from src.costmodel import HardwareCostModel, PassLoad
from src.costmodel.presets import load_presets
from src.disagg.closed_loop import _mva, estimate
from src.disagg.config import PoolShape, disagg_from_table, weight_bytes_per_gpu
from src.disagg.transfer import (
    CONNECTX7_GB_PER_S,
    NETWORK_BANDWIDTH_FRACTION,
    kv_bytes,
    kv_link,
    transfer_ms,
)
from src.online.steptime import StepTimer

PRESETS = load_presets()
MOE = "qwen3-30b-a3b"  # GQA MoE: 32 heads, 4 KV heads, 128 experts


def _cost(model=MOE, tp=2, ep=2, draft="ngram", gpu="h200", engine="sglang"):
    return HardwareCostModel.from_presets(gpu, model, tp=tp, ep=ep, engine=engine, draft=draft)


def _table(model=MOE, gpu="h200", **kw):
    return disagg_from_table(kw, PRESETS.model(model), PRESETS.gpu(gpu), PRESETS.params)


# --- the [disagg] table -----------------------------------------------------------------------

def test_dp_one_weights_per_gpu_are_the_replicas():
    m = PRESETS.model("deepseek-v3")
    for tp in (8, 16):
        assert weight_bytes_per_gpu(m, tp, 1) == pytest.approx(m.weight_bytes / tp, rel=1e-12)
    # attention DP replicates the attention weights: more bytes per GPU than TP over all GPUs
    assert weight_bytes_per_gpu(m, 1, 8) > weight_bytes_per_gpu(m, 8, 1)


@pytest.mark.parametrize("table, field, words", [
    ({"decode_tp": 3}, "disagg.decode_tp", "does not divide the 32 query heads"),
    ({"decode_tp": 2, "decode_ep": 4}, "disagg.decode_ep", "allowed: 1 or 2"),
    ({"prefill_dp": 3, "prefill_ep": 3}, "disagg.prefill_ep", "does not divide the 128 routed"),
    ({"decode_workers": 0}, "disagg.decode_workers", "integer >= 1"),
    ({"decode_gpus": 8}, "disagg.decode_gpus", "unknown key"),
    ({"kv_link": "pcie"}, "disagg.kv_link", "allowed: auto, nvlink, network, none"),
])
def test_bad_tables_name_the_field(table, field, words):
    with pytest.raises(ConfigError) as e:
        _table(**table)
    assert e.value.field_name == field and words in str(e.value)
    assert "\n" not in str(e.value)


def test_a_pool_whose_weights_do_not_fit_names_the_smallest_shape_that_does():
    m, g = PRESETS.model("deepseek-v3"), PRESETS.gpu("h200")
    with pytest.raises(ConfigError) as e:
        disagg_from_table({"prefill_tp": 8, "decode_tp": 4}, m, g, PRESETS.params)
    assert e.value.field_name == "disagg.decode_tp"
    # 8 GPUs is the fewest dividing the 256 experts whose weights fit on 141 GB GPUs
    assert "decode_tp 1, decode_dp 8, decode_ep 8 (the smallest shape that fits" in str(e.value)
    ok = disagg_from_table({"prefill_tp": 8, "decode_dp": 8, "decode_ep": 8}, m, g,
                           PRESETS.params)
    assert ok.decode == PoolShape(workers=1, tp=1, ep=8, dp=8) and ok.gpus == 16


# --- KV transfer --------------------------------------------------------------------------------

def test_transfer_time_scales_with_prompt_length():
    m, g = PRESETS.model(MOE), PRESETS.gpu("h200")
    for name in ("nvlink", "network"):
        link = kv_link(name, g)
        t = {p: transfer_ms(m, p, link, 2, 2) - link.latency_ms for p in (512, 1024, 8192)}
        assert t[1024] == pytest.approx(2 * t[512], rel=1e-12)
        assert t[8192] == pytest.approx(16 * t[512], rel=1e-12)
    # closed form: P x KV bytes per token / the 2 GPUs sharing the 4 KV heads / (50 GB/s x the
    # achieved fraction 0.72 of Mooncake's measured transfers), + 0.40 ms
    net = kv_link("network", g)
    assert net.latency_ms == 0.40 and NETWORK_BANDWIDTH_FRACTION == 0.72
    assert transfer_ms(m, 1000, net, 2, 2) == pytest.approx(
        0.40 + 1000 * m.kv_bytes_per_token / 2 / (CONNECTX7_GB_PER_S * 0.72 * 1e9) * 1e3)
    assert transfer_ms(m, 1000, kv_link("none", g), 2, 2) == 0.0


def test_mla_latent_is_sent_whole_to_every_gpu_of_the_rank():
    m, g = PRESETS.model("deepseek-v3"), PRESETS.gpu("h200")
    link = kv_link("nvlink", g)
    assert kv_bytes(m, 1) == m.kv_bytes_per_token  # 61 layers x 576 values x 2 bytes
    assert transfer_ms(m, 4096, link, 8, 1) == transfer_ms(m, 4096, link, 8, 8)


# --- the decode pool's steps ---------------------------------------------------------------------

@pytest.mark.parametrize("draft, gamma", [("ngram", 0), ("eagle3", 3)])
def test_attention_dp_one_is_the_tp_path_bit_for_bit(draft, gamma):
    cost = _cost(draft=draft)
    worker = DecodeWorker(cost, PoolShape(workers=1, tp=2, ep=2, dp=1))
    for n, ctx in ((1, 100), (37, 1500.5), (256, 4000)):
        load = PassLoad.from_totals(np.array([n]), np.array([n * ctx]))
        target, drafts = cost.step_ms(load, np.array([gamma]), with_draft=gamma > 0)
        assert worker.step_ms(n, ctx, gamma) == float(target[0] + drafts[0])


def test_one_prefill_one_decode_worker_reproduce_the_aggregated_decode_steps():
    """With zero transfer cost, the decode worker's step is the aggregated replica's serving
    engine's step (StepTimer, src/online/steptime.py) when no prefill chunk is in it, and the
    estimate's TTFT is the prefill alone at one client."""
    cost = _cost(draft="eagle3")
    timer = StepTimer(cost, speculative=True)
    shape = PoolShape(workers=1, tp=2, ep=2, dp=1)
    worker = DecodeWorker(cost, shape)
    for n, ctx, gamma in ((8, 1536, 0), (8, 1536, 2), (64, 3000, 4)):
        mask = np.ones((1, n), bool)
        target, drafts = timer.decode_ms(mask, np.array([gamma]), np.full((1, n), ctx))
        assert worker.step_ms(n, ctx, gamma) == float(target[0] + drafts[0])
        # no prefill overlapping: the engine's prefill extra is zero
        assert float(timer.prefill_extra_ms(np.array([n]), np.array([gamma]),
                                            np.array([n * ctx]), np.array([0]), np.array([0]),
                                            np.array([0.0]), np.array([0]))[0]) == 0.0
    disagg = _table(prefill_tp=2, prefill_ep=2, decode_tp=2, decode_ep=2, kv_link="none")
    est = estimate(_cost(), worker, disagg, isl=1024, osl=256, concurrency=1)
    assert est.transfer_ms == 0.0 and est.queue_ms == pytest.approx(0.0, abs=1e-9)
    assert est.ttft_ms == pytest.approx(float(_cost().prefill_time(1, 1024)), rel=1e-12)
    assert est.decode_step_ms == worker.step_ms(1, 1024 + 128, 0)


def test_attention_dp_reads_each_ranks_own_kv():
    """MLA under TP replicates the latent: every GPU reads all N sequences' KV; under DP a rank
    reads its own N / dp. At long contexts the DP step is the faster one."""
    dp8 = DecodeWorker(_cost("deepseek-v3", tp=8, ep=8), PoolShape(1, 1, 8, 8))
    tp8 = DecodeWorker(_cost("deepseek-v3", tp=8, ep=8), PoolShape(1, 8, 8, 1))
    assert dp8.step_ms(256, 8000, 0) < tp8.step_ms(256, 8000, 0)
    assert dp8.requests_per_rank(257) == 33


def test_all_to_all_closed_form():
    """An engine without measured tables (vllm-2024) keeps the roofline all-to-all; sglang's
    measured one is tests/test_disagg_validation.py's."""
    m = PRESETS.model("deepseek-v3")
    w = DecodeWorker(_cost("deepseek-v3", tp=8, ep=8, engine="vllm-2024"), PoolShape(1, 1, 8, 8))
    moe_layers = m.n_layers - m.first_k_dense_replace
    values = 32 * m.experts_per_token * m.hidden_size * 7 / 8
    assert float(w.all_to_all_ms(32)) == pytest.approx(
        moe_layers * values * 3 / (PRESETS.gpu("h200").interconnect_bidirectional_gb_per_s
                                   / 2 * 1e9) * 1e3, rel=1e-12)


# --- the closed loop ------------------------------------------------------------------------------

def test_mva_single_server_closed_form():
    """One server, no think time: every client but the one served waits, R = C s; and with a
    long think time nobody queues, R = s."""
    R, X = _mva(10, 2.0, 1, 0.0)
    assert R == pytest.approx(20.0) and X == pytest.approx(0.5)
    R, _ = _mva(3, 1.0, 1, 1e9)
    assert R == pytest.approx(1.0, rel=1e-6)


def test_estimate_obeys_littles_law_and_speculation_helps_at_low_load():
    disagg = _table(prefill_tp=2, prefill_ep=2, decode_tp=2, decode_ep=2)
    worker = DecodeWorker(_cost(draft="eagle3"), disagg.decode)
    greedy = estimate(_cost(), worker, disagg, 2048, 512, 32)
    spec = estimate(_cost(), worker, disagg, 2048, 512, 32, gamma=3, alphas=[0.7])
    for e in (greedy, spec):
        cycle_ms = e.ttft_ms + 511 * e.tpot_ms
        assert e.throughput_tokens_per_s == pytest.approx(32 / cycle_ms * 512 * 1e3, rel=1e-3)
        assert 0 < e.prefill_utilisation < 1
        assert e.decode_requests_per_worker <= 32
    assert spec.tpot_ms < greedy.tpot_ms
    assert spec.tokens_per_step == pytest.approx((1 - 0.7 ** 4) / 0.3)


def test_decode_pool_that_cannot_hold_the_clients_names_the_workers_needed():
    m = "deepseek-v3"
    disagg = disagg_from_table({"prefill_tp": 8, "decode_dp": 8, "decode_ep": 8},
                               PRESETS.model(m), PRESETS.gpu("h200"), PRESETS.params)
    worker = DecodeWorker(_cost(m, tp=8, ep=8), disagg.decode)
    with pytest.raises(ConfigError) as e:
        estimate(_cost(m, tp=8, ep=1), worker, disagg, 32768, 4096, 4096)
    assert e.value.field_name == "disagg.decode_workers"
    need = int(str(e.value).rsplit(">= ", 1)[1])
    assert need > 1 and math.isfinite(need)


# --- the disaggregated silicon rows ---------------------------------------------------------------

def test_silicon_rows_map_their_pools_or_say_why_not():
    from src.disagg.silicon import load_disagg_rows, map_row, pool_table, row_concurrency
    rows = load_disagg_rows()
    row = rows[rows.id == "dsr1_b200_sglang_fp4_disagg_1024x1024_c512_cfg532"].iloc[0]
    assert row_concurrency(row) == 512  # = 32 per rank x 8 DP ranks x 2 workers
    scenario, disagg, isl, osl, conc = map_row(row, PRESETS)
    assert disagg.prefill == PoolShape(1, 1, 4, 4) and disagg.decode == PoolShape(2, 1, 8, 8)
    assert (isl, osl, conc) == (1024, 1024, 512) and scenario.engine_profiles == ("sglang",)
    empty = rows[rows.prefill_num_workers.isna()].iloc[0]
    assert pool_table(empty, "prefill").startswith("worker counts missing")
    mix = empty.copy()
    mix["prefill_num_workers"], mix["prefill_tp_size"], mix["prefill_attention_dp_size"] = 1, 8, 1
    mix["prefill_moe_tp_size"], mix["prefill_moe_ep_size"] = 2, 4
    assert pool_table(mix, "prefill").startswith("moe_tp x ep mix")


def test_silicon_disagg_bad_systems_exit_2_and_write_nothing(capsys, tmp_path):
    from helpers import run_main
    out = tmp_path / "o"
    done = run_main(capsys, ["silicon-validate-disagg", "--systems", "h999", "--out", str(out)])
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines()[-1].startswith("error: --systems: 'h999' has no")
    done = run_main(capsys, ["silicon-validate-disagg", "--limit", "0", "--out", str(out)])
    assert done.returncode == 2 and "--limit" in done.stderr and not out.exists()


def test_a_scenario_with_a_disagg_table():
    from src.config import read_toml
    from src.disagg.scenario import disagg_scenario_from_dict
    path = "configs/scenarios/moe-deepseek-v3-mtp-8xh200.toml"
    data = dict(read_toml(path, "--scenario"))
    data["disagg"] = {"prefill_tp": 8, "decode_dp": 8, "decode_ep": 8, "kv_link": "network"}
    scenario, disagg = disagg_scenario_from_dict(data, path)
    assert scenario.target_model_id == "deepseek-v3" and disagg.gpus == 16
    assert disagg.link() == "network"
    data["disagg"] = {"prefill_tp": 8, "decode_tp": 2}
    with pytest.raises(ConfigError, match="disagg.decode_tp: .* allowed: decode_tp 1, decode_dp 8"):
        disagg_scenario_from_dict(data, path)
    with pytest.raises(ConfigError, match="^disagg: missing"):
        disagg_scenario_from_dict({"scenario": data["scenario"]}, path)
