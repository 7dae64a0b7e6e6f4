"""The aggregated validation's benchmark runs (src/validation/bench_run.py, silicon_source.py):
benchmark_serving.py's uniform lengths and their mean, which rows InferenceX measured, the row
mapping at the benchmark's lengths and prompts, and the opening burst in the run's mean TTFT."""
import numpy as np
import pandas as pd
import pytest

from src.config import FixedLength, UniformLength
from src.validation.bench_run import benchmark_ttft_ms, length_bounds, mean_length
from src.validation.silicon_rows import SiliconCase, map_row
from src.validation.silicon_serve import serve_config
from src.validation.silicon_source import (
    DEFAULT_PROMPTS_PER_CLIENT,
    INFERENCEX_PROMPTS_PER_CLIENT,
    bench_run_of,
)

ENGINES = {"vllm-v1", "sglang"}
DB_DUMP = ("db-dump/2026-04-27; config_id=587; silicon_concurrency=32; "
           "measured=2026-02-20T00:00:00.000Z; workflow_run_id=295; vllm/vllm-openai:v0.18.0")
GAP = ("source_file=/Users/x/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/Qwen.csv; "
       "silicon_concurrency=8")


def _row(**changes):
    row = {"id": "x", "system": "h200_sxm", "backend": "vllm", "backend_version": "0.18.0",
           "model_path": "meta-llama/Llama-3.1-70B", "precision": "fp8", "mode": "agg",
           "isl": 1024, "osl": 8192, "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
           "batch_size": 16.0, "tp_size": 4.0, "pp_size": 1.0, "attention_dp_size": 1.0,
           "moe_tp_size": 4.0, "moe_ep_size": 1.0, "silicon_ttft_ms": 100.0,
           "silicon_tpot_ms": 20.0, "silicon_data_source": DB_DUMP}
    row.update(changes)
    return pd.Series(row)


def test_lengths_are_numpys_uniform_integers_up_to_the_nominal():
    # sample_uniform: np.random.randint(int(L x 0.8), L + 1)
    assert length_bounds(1024) == (819, 1024) and length_bounds(8192) == (6553, 8192)
    assert mean_length(1024) == 921 and mean_length(8192) == 7372
    assert length_bounds(1000, 1.0) == (1000, 1000) and mean_length(1000, 1.0) == 1000


def test_the_run_mean_holds_one_burst_request_per_client():
    assert benchmark_ttft_ms(100.0, 600.0, 10) == pytest.approx((600.0 + 9 * 100.0) / 10)
    assert benchmark_ttft_ms(100.0, 600.0, 1) == pytest.approx(600.0)  # all in the burst
    assert benchmark_ttft_ms(100.0, 100.0, 10) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        benchmark_ttft_ms(100.0, 600.0, 0)


@pytest.mark.parametrize("source, benchmark, ratio, w", [
    (DB_DUMP, "inferencex", 0.8, INFERENCEX_PROMPTS_PER_CLIENT),
    ("source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=16", "inferencex",
     0.8, INFERENCEX_PROMPTS_PER_CLIENT),
    ("source_file=2026-03-25.csv; model=MiniMax-M2.5", "inferencex", 0.8, 10),
    (GAP, "", 1.0, DEFAULT_PROMPTS_PER_CLIENT),
    ("source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=16", "", 1.0, 4),
    (float("nan"), "", 1.0, 4),
])
def test_the_benchmark_is_read_from_the_rows_source(source, benchmark, ratio, w):
    run = bench_run_of(source)
    assert (run.benchmark, run.range_ratio, run.prompts_per_client) == (benchmark, ratio, w)


def test_an_inferencex_row_runs_its_benchmarks_lengths_and_prompts():
    case = map_row(_row(), ENGINES)
    assert isinstance(case, SiliconCase) and case.benchmark == "inferencex"
    assert (case.isl, case.osl) == (1024, 8192)  # the nominal maxima stay the row's
    assert case.mean_lengths() == ((819 + 1024) / 2, (6553 + 8192) / 2)
    cfg = serve_config(case)
    assert cfg.prompt_len == UniformLength(819, 1024)
    assert cfg.output_len == UniformLength(6553, 8192)
    assert cfg.requests_per_replication == INFERENCEX_PROMPTS_PER_CLIENT * 16
    from src.online.workloads import mean_length as drawn_mean
    assert drawn_mean(cfg.prompt_len) == pytest.approx(921.5, abs=1.0)
    from src.validation.silicon import table_row
    out = table_row(_row(), case, {"tpot_ms": 20.0, "ttft_ms": 100.0})
    assert (out["benchmark"], out["range_ratio"], out["prompts_per_client"]) == ("inferencex",
                                                                                 0.8, 10)


def test_a_row_of_an_unestablished_benchmark_keeps_fixed_lengths():
    case = map_row(_row(silicon_data_source=GAP), ENGINES)
    cfg = serve_config(case)
    assert (cfg.prompt_len, cfg.output_len) == (FixedLength(1024), FixedLength(8192))
    assert cfg.requests_per_replication == DEFAULT_PROMPTS_PER_CLIENT * 16
    # a row without the column (older test rows) is not established either
    bare = map_row(_row().drop("silicon_data_source"), ENGINES)
    assert bare.range_ratio == 1.0


def test_the_simulated_mean_ttft_is_the_burst_plus_the_later_waves():
    """16 clients of 2k prompts on an idle replica: the first 16 requests, sent at t = 0, are
    the opening burst (they queue behind each other's prefill passes), and the reported mean
    TTFT is (burst + 9 steady) / 10 over the 160 requests, none dropped as warm-up."""
    from dataclasses import replace

    from src.online.study import prepare, run_serving, simulate_rate
    case = map_row(_row(isl=2048, osl=32), ENGINES)
    cfg = serve_config(case)
    prepared = prepare(cfg)
    result, groups, _ = simulate_rate(cfg, prepared, float(case.concurrency))
    rows = next(g.rows for g in groups if g.policy.name == "none")
    c, w = case.concurrency, case.prompts_per_client
    for r in rows:
        sent, first = result.arrival_s[r], result.first_token_s[r]
        assert np.isfinite(sent).sum() == c * w
        assert np.all(sent[:c] == 0.0) and np.all(sent[c:] > 0.0)
        ttft = first - sent
        burst, steady = ttft[:c].mean(), ttft[c:].mean()
        assert burst > steady  # the burst's prompts wait for one another's passes
        assert ttft.mean() == pytest.approx(benchmark_ttft_ms(steady, burst, w), rel=1e-12)
    table = run_serving(replace(cfg), workers=1, prepared=prepared)["table"]
    reported = float(table[table.policy == "none"].iloc[0]["ttft_mean_ms"])
    expected = np.mean([(result.first_token_s[r] - result.arrival_s[r]).mean() for r in rows])
    assert reported == pytest.approx(expected * 1e3, rel=1e-9)
