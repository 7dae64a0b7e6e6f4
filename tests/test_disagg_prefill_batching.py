"""Batched prefill on the prefill pool (src/disagg/prefill_front.py FcfsServers, PrefillPool;
src/disagg/prefill_budget.py): closed forms, batching against one prompt a pass, the budget."""
import heapq
import math

import numpy as np
import pytest

from src.costmodel import HardwareCostModel, load_presets
from src.disagg.prefill_budget import prefill_token_budget
from src.disagg.prefill_front import FcfsServers, PrefillPool, fcfs_latency_s
from src.disagg.transfer import kv_link


def _pool(budget: int, servers: int = 1, dp: int = 1, model="llama-3.1-8b", gpu="h100-sxm",
          tp: int = 1, ep: int = 1, link="network") -> PrefillPool:
    cost = HardwareCostModel.from_presets(gpu, model, tp=tp * dp, ep=ep, engine="vllm-v1",
                                          draft="ngram")
    return PrefillPool(prefill_cost=cost, prefill_dp=dp, servers=servers, model=cost.target,
                       link=kv_link(link, cost.gpu), prefill_tp=tp, decode_tp=1,
                       budget_tokens=budget)


def _poisson(n: int, rate_per_s: float, seed: int = 3):
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1 / rate_per_s, n)), rng.integers(8, 600, n)


@pytest.mark.parametrize("n, length, budget", [(10, 512, 2048), (7, 100, 300), (5, 64, 64)])
def test_prompts_sent_together_finish_in_ceil_passes(n, length, budget):
    """N prompts of L tokens sent at 0 to one server with budget B (L <= B): passes of
    m = floor(B / L) prompts, ceil(N / m) of them (ceil(N L / B) where L divides B); pass j ends
    at j x price(m prompts), the last at the price of what is left."""
    price = lambda prompts: 1.0 + 0.01 * sum(prompts)  # noqa: E731  (weights once, per token)
    q = FcfsServers(1, budget, price)
    for k in range(n):
        q.serve(0.0, length, price([length]), k)
    done = dict(q.settle())
    m = budget // length
    passes = math.ceil(n / m)
    assert len(set(done.values())) == passes
    if budget % length == 0:
        assert passes == math.ceil(n * length / budget)
    for k in range(n):
        j = k // m
        last = min(m, n - j * m)
        assert done[k] == pytest.approx(j * price([length] * m) + price([length] * last))
    assert q.busy == pytest.approx(sum(q.pass_service))
    assert sum(q.pass_service) == pytest.approx(
        (n // m) * price([length] * m) + (price([length] * (n % m)) if n % m else 0.0))


def _one_at_a_time(arrival_s, service_s, servers: int) -> np.ndarray:
    """The pre-batching rule: done = max(sent, earliest free server) + service."""
    free = [0.0] * servers
    done = []
    for a, s in zip(arrival_s.tolist(), service_s.tolist()):
        start = max(a, heapq.heappop(free))
        heapq.heappush(free, start + s)
        done.append(start + s)
    return np.array(done)


@pytest.mark.parametrize("servers", [1, 3])
def test_a_budget_holding_one_prompt_is_the_one_at_a_time_queue_bit_for_bit(servers):
    """Prompts of 300..599 tokens under a budget of 599: no two fit, every pass holds one
    prompt, and the latencies, busy time and end are the one-at-a-time rule's, float for float."""
    arrival, prompts = _poisson(400, 300.0)
    prompts = np.minimum(prompts, 299) + 300  # 300..599 tokens: two never fit in 599
    pool = _pool(599, servers)
    latency, busy, end = fcfs_latency_s(arrival, prompts, pool)
    alone = pool.prefill_ms(prompts) * 1e-3
    done = _one_at_a_time(arrival, alone, servers)
    assert np.array_equal(latency, done - arrival + pool.transfer_ms(prompts) * 1e-3)
    assert busy == float(np.sum(alone)) and end == float(done.max())


@pytest.mark.parametrize("servers", [1, 2])
def test_batching_is_never_slower_than_one_prompt_a_pass(servers):
    """The same Poisson arrivals, over the one-at-a-time pool's capacity: batching up to 8192
    tokens ends sooner, keeps the pool busy for less, and the mean latency is lower; a pass of n
    prompts costs no more than n passes of one (the weights are read once)."""
    arrival, prompts = _poisson(600, 4000.0)
    one = fcfs_latency_s(arrival, prompts, _pool(1, servers))
    many = fcfs_latency_s(arrival, prompts, _pool(8192, servers))
    assert many[2] <= one[2] and many[1] <= one[1]
    assert many[0].mean() < one[0].mean()
    pool = _pool(8192)
    assert pool.batch_ms(prompts[:16]) <= float(np.sum(pool.prefill_ms(prompts[:16])))


def test_a_pass_prices_the_total_tokens_with_attention_per_prompt():
    """n equal prompts: the cost model's pass of n prompts; one prompt: prefill_ms exactly;
    unequal prompts of the same total cost more than equal ones (causal attention per prompt
    grows as its length squared) and no less than the GEMMs of the total."""
    pool = _pool(8192, model="llama-3.1-8b")
    cost = pool.prefill_cost
    assert pool.batch_ms([512] * 4) == float(cost.prefill_time(4, 512))
    assert pool.batch_ms([700]) == float(pool.prefill_ms(700))
    assert pool.batch_ms([128, 3968]) > pool.batch_ms([2048, 2048])
    dp = _pool(8192, dp=8, model="deepseek-v3", gpu="h200", ep=8)
    assert dp.batch_ms([20] * 3) == float(dp.prefill_cost.prefill_time(24, 20))


def test_the_budget_is_the_engines():
    """SGLang: chunked_prefill_size 8192 under 160 GiB (H200), 16384 at 160 GiB and more (B200),
    divided by the attention-DP ranks; other engines: serve's max_num_batched_tokens."""
    presets = load_presets()
    h200, b200 = presets.gpu("h200"), presets.gpu("b200")
    assert prefill_token_budget("sglang", h200, 1, 4096) == 8192
    assert prefill_token_budget("sglang", h200, 8, 4096) == 1024
    assert prefill_token_budget("sglang", b200, 1, 4096) == 16384
    assert prefill_token_budget("vllm-v1", h200, 8, 4096) == 4096


def test_a_request_joining_a_pass_moves_its_earlier_requests_and_settle_reports_them():
    """Server busy until 10 (a first pass); requests sent at 1 and 2 wait and share the next pass
    (start 10): settled after the first, it ends at 10 + price of one; after the second, both
    end at 10 + price of two; a request sent at 30 (server idle) runs alone."""
    price = lambda prompts: 5.0 + len(prompts)  # noqa: E731
    q = FcfsServers(1, 1000, price)
    q.serve(0.0, 10, 10.0, "a")
    assert q.settle() == [("a", 10.0)]
    q.serve(1.0, 10, price([10]), "b")
    assert q.settle() == [("a", 10.0), ("b", 16.0)]
    q.serve(2.0, 10, price([10]), "c")
    assert q.settle() == [("b", 17.0), ("c", 17.0)]
    q.serve(30.0, 10, price([10]), "d")
    assert q.settle() == [("b", 17.0), ("c", 17.0), ("d", 36.0)]
    assert q.pass_service == [10.0, 7.0, 6.0] and q.busy == 23.0
