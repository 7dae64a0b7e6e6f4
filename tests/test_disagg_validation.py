"""silicon-validate-disagg (src/disagg/silicon.py): a TensorRT-LLM row runs on the trtllm
profile, refusals are counted by reason, the measured all-to-all and the replicated attention
projections of an attention-DP decode worker, and a published measurement of speculation on a
disaggregated deployment beside the model (src/disagg/published.py)."""
import numpy as np
import pandas as pd
import pytest

from src.attention_dp.worker import DecodeWorker
from src.costmodel import HardwareCostModel
from src.costmodel.presets import load_presets
from src.disagg.config import PoolShape
from src.disagg.silicon import load_disagg_rows, map_row, table_row
from src.disagg.silicon_cli import summary_lines

PRESETS = load_presets()


@pytest.fixture(scope="module")
def rows():
    return load_disagg_rows()


def test_trtllm_disagg_row_maps_to_the_trtllm_profile(rows):
    # dsr1_h200_trtllm_fp8_disagg_8192x1024_c128_cfg291: TensorRT-LLM under Dynamo 0.8.1
    # (backend_version is the Dynamo runtime's); prefill 1 x DEP8, decode 1 x DEP8
    row = rows[rows.id == "dsr1_h200_trtllm_fp8_disagg_8192x1024_c128_cfg291"].iloc[0]
    assert row.backend == "trtllm"
    scenario, disagg, isl, osl, conc = map_row(row, PRESETS)
    assert scenario.engine_profiles == ("trtllm",)
    assert scenario.gpu_id == "h200" and (isl, osl, conc) == (8192, 1024, 128)
    assert disagg.decode == PoolShape(workers=1, tp=1, ep=8, dp=8)
    assert disagg.link() == "network"  # 16 GPUs: two nodes


def test_a_row_without_worker_counts_is_refused_and_counted(rows):
    no_workers = rows[rows.prefill_num_workers.isna() & rows.system.isin(["h200_sxm"])]
    picked = no_workers.iloc[:2]
    reasons = [map_row(r, PRESETS) for _, r in picked.iterrows()]
    assert reasons == ["worker counts missing: prefill_num_workers is empty"] * 2
    table = pd.DataFrame([table_row(r, m, None) for (_, r), m in zip(picked.iterrows(), reasons)])
    lines = summary_lines(table)
    assert "0/2 rows estimated" in lines[0]
    assert lines[1] == "refused: worker counts missing 2"


def test_dense_rows_do_not_check_the_moe_columns(rows):
    # Qwen3-32B-NVFP4 (dense) writes moe_tp 1, moe_ep 1 beside decode tp 4: not a bad row; it is
    # refused only because that checkpoint id is not a bundled model
    row = rows[rows.model_path == "nvidia/Qwen3-32B-NVFP4"].iloc[0]
    assert map_row(row, PRESETS) == "unknown model: nvidia/Qwen3-32B-NVFP4"


def _worker(engine, dp=8):
    cost = HardwareCostModel.from_presets("h200", "deepseek-v3", tp=8, ep=8, engine=engine)
    return DecodeWorker(cost, PoolShape(1, 8 // dp, 8, dp))


def test_measured_all_to_all_is_the_engines_deepep_low_latency_table():
    m = PRESETS.model("deepseek-v3")
    moe_layers = m.n_layers - m.first_k_dense_replace  # 58
    # aiconfigurator-core 0.12.0 systems/data/h200_sxm/comm/sglang/0.5.12/
    # wideep_deepep_ll_perf.parquet, hidden 7168, top-8, 256 experts, 32 tokens per rank:
    # dispatch 16.493 us + combine 24.555 us per layer
    assert float(_worker("sglang").all_to_all_ms(32)) == pytest.approx(
        moe_layers * (16.493 + 24.555) * 1e-3, rel=1e-9)
    # comm/trtllm/1.3.0rc11/moe_a2a_perf.parquet, trtllm_deepep_ll, 128 tokens: FP8 dispatch
    # 72.26864 us + BF16 combine 71.09760 us
    assert float(_worker("trtllm").all_to_all_ms(128)) == pytest.approx(
        moe_layers * (72.26864 + 71.09760) * 1e-3, rel=1e-6)


def test_dp_ranks_stream_their_own_attention_projections():
    """At dp 8, tp 1 each GPU reads DeepSeek-V3's q_b, kv_b and o_proj whole (1/tp), not 1/8:
    the extra time is at least their 7/8 share of bytes at the HBM peak."""
    w = _worker("sglang")
    m = w.cost.target
    per_layer = (m.q_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
                 + m.kv_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.v_head_dim)
                 + m.n_heads * m.v_head_dim * m.hidden_size)
    extra_bytes = per_layer * m.n_layers * 7 / 8  # FP8: one byte a value
    assert extra_bytes == pytest.approx(9.2e9, rel=0.02)
    n = np.array([16.0])
    extra_ms = (w.attention_gemms_ms(w._rank_c, 1, n)
                - w.attention_gemms_ms(w.cost._target_c, 8, 8 * n))
    assert float(extra_ms[0]) >= extra_bytes / w.cost.gpu.memory_bandwidth_bytes_per_s * 1e3


def test_published_pd_mtp_accept_length_beside_the_model():
    from src.disagg import published
    # SGLang issue #7927 (github.com/sgl-project/sglang/issues/7927): DeepSeek-V3, EAGLE worker
    # over MTP, 3 drafts, random 2500/300: accept length 3.19 aggregated, 1.98 PD-disaggregated
    src = published.ISSUE_7927
    assert (src["tau_aggregated"], src["tau_disaggregated"], src["drafts"]) == (3.19, 1.98, 3)
    tau = published.predicted_tau()  # the model: the same tau aggregated and disaggregated
    assert tau == pytest.approx(2.8935, abs=1e-4)
    assert tau / src["tau_aggregated"] - 1 == pytest.approx(-0.093, abs=0.002)  # agrees to 9%
    assert tau / src["tau_disaggregated"] - 1 == pytest.approx(0.461, abs=0.002)  # the finding
    # what the PD loss costs on the model (2x8xH200 scenario, 64 clients): speculation's TPOT
    # gain over greedy falls from ~2.4x to ~1.4x (measured fused-MoE tables, the host CPU of the
    # busiest DP rank: SGLang's speculative step does not hide its CPU; 2.13x / 1.27x with the
    # CPU counted over all 64 requests)
    s = published.speedups(64)
    assert s[3.19] == pytest.approx(2.36, abs=0.05)
    assert s[1.98] == pytest.approx(1.39, abs=0.05)


def test_rows_without_worker_counts_that_repeat_a_measured_row_are_named_as_such(rows):
    # the older dumps' row ..._1024x1024_c288_tp8_0_ep8_0_353 has no worker counts and one
    # coarse tp 8 / ep 8 for both pools; its measured TTFT and TPOT are float for float those of
    # the db-dump row cfg590 (1 x DEP8 prefill, 9 x TEP8 decode), which the validation estimates
    from src.disagg.silicon import duplicates_without_workers
    sub = rows[rows.system.isin(["h200_sxm", "b200_sxm"])].reset_index(drop=True)
    twins = duplicates_without_workers(sub)
    assert len(twins) == 111
    i = sub.index[sub.id == "2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_disagg_1024x1024_"
                            "c288_tp8_0_ep8_0_353"][0]
    assert twins[i] == "dsr1_h200_trtllm_fp8_disagg_1024x1024_c288_cfg590"
    by_id = sub.set_index("id")
    for j, twin in twins.items():
        a, b = sub.loc[j], by_id.loc[twin]
        assert pd.isna(a.prefill_num_workers) and not pd.isna(b.prefill_num_workers)
        assert (a.silicon_ttft_ms, a.silicon_tpot_ms, a.isl, a.osl) == \
            (b.silicon_ttft_ms, b.silicon_tpot_ms, b.isl, b.osl)


def test_rows_run_the_recipes_fp8_kv_cache(rows):
    # the srt-slurm recipes behind the rows set an FP8 KV cache (RECIPE_KV_CACHE); the CSV has no
    # KV column. The scenario's cost model and the [disagg] pools carry it.
    from dataclasses import replace

    from src.disagg.silicon import RECIPE_KV_CACHE
    row = rows[rows.id == "dsr1_h200_trtllm_fp8_disagg_8192x1024_c128_cfg291"].iloc[0]
    scenario, *_ = map_row(row, PRESETS)
    assert RECIPE_KV_CACHE == "fp8" and scenario.kv_cache == "fp8"
    fp8 = replace(scenario, tp=8, ep=8).cost_model().target
    bf16 = replace(scenario, kv_cache="", tp=8, ep=8).cost_model().target
    assert fp8.kv_cache_format == "fp8" and bf16.kv_cache_format == "bf16"
    assert fp8.kv_bytes_per_token < 0.6 * bf16.kv_bytes_per_token


def test_a_row_the_engine_ran_fits_its_fp8_kv_cache_not_a_bf16_one(rows):
    # dsr1_b200_trtllm_fp8_disagg_1024x1024_c4096_cfg549: 4,096 clients on one DP-8 decode worker
    # (512 a rank, the recipe's batch512) ran; a BF16 KV cache would not hold them
    from dataclasses import replace

    from src.config import ConfigError
    from src.disagg.closed_loop import check_decode_fits
    from src.disagg.sa_bench import mean_length
    row = rows[rows.id == "dsr1_b200_trtllm_fp8_disagg_1024x1024_c4096_cfg549"].iloc[0]
    scenario, disagg, isl, osl, conc = map_row(row, PRESETS)
    dec = disagg.decode
    tokens = mean_length(isl) + mean_length(osl) + 1
    per_rank = conc // (dec.workers * dec.dp)
    assert per_rank == 512
    for kv, fits in (("fp8", True), ("", False)):
        cost = replace(scenario, kv_cache=kv, tp=dec.gpus_per_worker, ep=dec.ep).cost_model()
        if fits:
            check_decode_fits(cost.target, cost.gpu, cost.params, dec, per_rank, tokens)
        else:
            with pytest.raises(ConfigError):
                check_decode_fits(cost.target, cost.gpu, cost.params, dec, per_rank, tokens)


def test_the_aggregated_silicon_scenario_keeps_the_checkpoints_kv_cache():
    from src.hardware.scenario import default_hardware_scenario
    from src.validation.silicon_serve import SiliconScenario
    base = default_hardware_scenario()
    s = SiliconScenario(**{f: getattr(base, f) for f in base.__dataclass_fields__},
                        weight_format="fp8")
    assert s.target_formats() == {"weight_format": "fp8"}
