"""sa-bench's requests in the disaggregated validation (src/disagg/sa_bench.py): the mean of its
uniform lengths, the opening burst (C prompts sent at once to idle batched FCFS prefill servers)
and the run's mean TTFT over sa-bench's 5 prompts per client."""
import math
from types import SimpleNamespace

import pytest

from src.costmodel.presets import load_presets
from src.disagg.prefill_front import PrefillPool
from src.disagg.sa_bench import (
    SA_BENCH_PROMPTS_PER_CLIENT,
    benchmark_ttft_ms,
    burst_ttft_ms,
    mean_length,
    validation_pool,
)
from src.disagg.silicon import load_disagg_rows, map_row, predict, table_row
from src.disagg.transfer import KvLink

PASS_MS_PER_TOKEN = 0.01  # a made-up linear prefill price: 10 ms per 1,000 prompt tokens


class _LinearPrefill:
    """prefill_time(n prompts, P tokens each) = n x P x PASS_MS_PER_TOKEN (ms)."""

    def prefill_time(self, n, p):
        return n * p * PASS_MS_PER_TOKEN


def _pool(servers: int, budget_tokens: int) -> PrefillPool:
    return PrefillPool(prefill_cost=_LinearPrefill(), prefill_dp=1, servers=servers,
                       model=SimpleNamespace(), link=KvLink("none", math.inf, 0.0),
                       prefill_tp=1, decode_tp=1, budget_tokens=budget_tokens)


def test_one_server_one_prompt_a_pass_is_the_arithmetic_queue():
    # a budget of one prompt: prompt k of C finishes after k passes of s; mean s (C + 1) / 2
    s = 1024 * PASS_MS_PER_TOKEN
    for c in (1, 4, 37):
        assert burst_ttft_ms(_pool(1, 1024), c, 1024) == pytest.approx(s * (c + 1) / 2)


def test_a_budget_of_four_prompts_batches_the_burst():
    # 8 prompts sent together on one idle server, budget 4 prompts: the first opens a pass at
    # t = 0 and the next three join it (it has not started before they are sent): 4 s, done at
    # 4 s; the last four a second pass, done at 8 s: mean 6 s
    s = 1024 * PASS_MS_PER_TOKEN
    assert burst_ttft_ms(_pool(1, 4 * 1024), 8, 1024) == pytest.approx(6 * s)


def test_benchmark_mean_is_one_burst_request_per_client():
    assert SA_BENCH_PROMPTS_PER_CLIENT == 5  # sa-bench: --num-prompts $((concurrency * 5))
    assert benchmark_ttft_ms(100.0, 600.0) == pytest.approx((600.0 + 4 * 100.0) / 5)
    assert benchmark_ttft_ms(100.0, 100.0) == pytest.approx(100.0)


def test_mean_length_of_sa_bench_uniform_integers():
    # numpy randint(int(0.8 L), L + 1): 819..1024 and 6553..8192
    assert mean_length(1024) == (819 + 1024) // 2 == 921
    assert mean_length(8192) == (6553 + 8192) // 2 == 7372
    assert mean_length(1000, 1.0) == 1000


def test_one_client_row_has_no_burst_to_wait_for():
    # dsr1_b200_trtllm_fp8_disagg_8192x1024_c1_cfg662: one client, so its burst is one prompt
    # on an idle server: prefill + transfer, the steady state's TTFT; the table's TTFT is it;
    # both at sa-bench's mean prompt, 7,372 of the nominal 8,192 tokens
    rows = load_disagg_rows()
    row = rows[rows.id == "dsr1_b200_trtllm_fp8_disagg_8192x1024_c1_cfg662"].iloc[0]
    mapped = map_row(row, load_presets())
    assert mapped[2:] == (8192, 1024, 1)
    est, burst = predict(*mapped)
    pool = validation_pool(mapped[0], mapped[1])
    assert est.prefill_ms == pytest.approx(float(pool.prefill_ms(7372)), rel=1e-12)
    assert burst == pytest.approx(est.prefill_ms + est.transfer_ms, rel=1e-9)
    assert est.ttft_ms == pytest.approx(burst, rel=1e-9)
    out = table_row(row, mapped, (est, burst))
    assert out["predicted_ttft_ms"] == pytest.approx(est.ttft_ms, rel=1e-9)
    assert out["predicted_burst_ttft_ms"] == burst


def test_the_burst_lifts_a_row_whose_clients_outnumber_a_pass():
    # dsr1_h200_trtllm_fp8_disagg_1024x1024_c36_cfg303: 36 clients on one TP8 prefill server
    # of 8192 tokens a pass (8 prompts of 921): the burst runs 5 passes, the steady state ~1
    rows = load_disagg_rows()
    row = rows[rows.id == "dsr1_h200_trtllm_fp8_disagg_1024x1024_c36_cfg303"].iloc[0]
    mapped = map_row(row, load_presets())
    est, burst = predict(*mapped)
    out = table_row(row, mapped, (est, burst))
    assert burst > 3 * est.ttft_ms
    assert out["predicted_ttft_ms"] == pytest.approx((burst + 4 * est.ttft_ms) / 5)
    assert out["ttft_error"] == pytest.approx(out["predicted_ttft_ms"]
                                              / out["measured_ttft_ms"] - 1)
