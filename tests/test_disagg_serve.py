"""`serve` on a disaggregated deployment (src/disagg/serve.py, prefill_front.py, pool_timer.py):
the decode worker against the aggregated replica, the prefill pool's queue and the KV transfer,
attention DP of 1 against the TP path, and bad [disagg] tables."""
import numpy as np
import pandas as pd
import pytest

from src.attention_dp.worker import DecodeWorker
from src.costmodel import HardwareCostModel
from src.disagg.config import PoolShape
from src.disagg.pool_timer import DecodePoolTimer, decode_capacity_tokens
from src.disagg.transfer import kv_link, transfer_ms
from src.online.steptime import StepTimer, kv_capacity_tokens
from tests.helpers import run_captured

QUICK = ["--requests", "4", "--replications", "2", "--workers", "1", "--quiet", "--no-plots"]
DENSE = """
[scenario]
name = "t-disagg"
description = "test"
gpu = "h100-sxm"
target = "llama-3.1-8b"
draft = "llama-3.2-1b"
tp = 1
engine_profiles = ["vllm-v1"]
acceptance_source = "test"

[study]
quality_modes = ["a"]

[study.alpha_modes.a]
kind = "point"
value = 0.7
"""


def _scenario(tmp_path, disagg: str | None, name="s.toml") -> str:
    path = tmp_path / name
    path.write_text(DENSE + ("" if disagg is None else "\n[disagg]\n" + disagg))
    return str(path)


def _serve(tmp_path, scenario: str, *args: str, out="out") -> pd.DataFrame:
    p = run_captured(["serve", "--scenario", scenario, *QUICK, *args,
                      "--out", str(tmp_path / out)])
    assert p.returncode == 0, p.stderr
    return pd.read_csv(tmp_path / out / "results" / "serving.csv")


def test_one_prefill_one_decode_worker_with_no_transfer_reproduce_the_replicas_decode_steps(
        tmp_path):
    """One client: no prefill ever overlaps a decode step in the aggregated replica, and the
    decode worker's steps are the replica's (dp 1, nothing priced for the prompt whose KV
    arrived), so TPOT per policy is the replica's to float rounding (the replica runs the
    compiled engine, the decode worker the numpy one: 1e-9 relative, tests/test_online_engine)."""
    args = ["--concurrency", "1", "--workload", "fixed:512:48", "--policies", "none,fixed:2"]
    agg = _serve(tmp_path, _scenario(tmp_path, None, "agg.toml"), *args, out="agg")
    dis = _serve(tmp_path, _scenario(tmp_path, "kv_link = \"none\"\n"), *args, out="dis")
    assert list(agg.policy) == list(dis.policy) == ["none", "fixed:2"]
    for col in ("tpot_mean_s", "tpot_p50_s", "tpot_p99_s"):
        np.testing.assert_allclose(dis[col], agg[col], rtol=1e-9)
    assert "prefill_utilisation" not in agg.columns  # aggregated outputs keep their columns
    assert (dis.prefill_utilisation > 0).all() and (dis.decode_utilisation > 0).all()
    # one client and one prefill server: nobody queues at the prefill pool, and the prefill
    # pool is busy N x s(512) of the makespan (the same requests in both replications)
    g = dis[dis.policy == "none"].iloc[0]
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", tp=1, engine="vllm-v1",
                                          draft="ngram")
    s = float(cost.prefill_time(1, 512)) * 1e-3
    assert g.prefill_utilisation == pytest.approx(4 * s / g.makespan_s, rel=1e-5)


def test_ttft_carries_the_transfer_which_scales_with_the_prompt(tmp_path):
    """At one client, TTFT over the network minus TTFT with no transfer is transfer_ms(P):
    the latency plus P x KV bytes per token / 50 GB/s; its variable part doubles with P."""
    gpu_model = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", tp=1, engine="vllm-v1",
                                               draft="ngram")
    link = kv_link("network", gpu_model.gpu)
    extra = {}
    for p in (256, 512):
        args = ["--concurrency", "1", "--workload", f"fixed:{p}:8", "--policies", "none"]
        none = _serve(tmp_path, _scenario(tmp_path, 'kv_link = "none"\n', "n.toml"), *args,
                      out=f"n{p}")
        net = _serve(tmp_path, _scenario(tmp_path, 'kv_link = "network"\n', "w.toml"), *args,
                     out=f"w{p}")
        extra[p] = (net.ttft_mean_s[0] - none.ttft_mean_s[0]) * 1e3
        assert extra[p] == pytest.approx(transfer_ms(gpu_model.target, p, link, 1, 1), rel=1e-4)
    assert extra[512] - link.latency_ms == pytest.approx(2 * (extra[256] - link.latency_ms),
                                                         rel=1e-3)


@pytest.mark.parametrize("servers, waits", [(1, 2.5), (2, 1.5), (4, 1.0)])
def test_the_prefill_pool_is_a_first_come_first_served_queue(tmp_path, servers, waits):
    """Four clients send at 0 to c prefill servers (no transfer) whose token budget (1023) holds
    one 512-token prompt a pass: prompt k of the first wave is done at ceil(k / c) s, and the
    decode worker (idle between them: a 2-token request decodes one step, shorter than s) takes
    each in as it lands, at no cost, so mean TTFT = s x (1 + 2 + 3 + 4) / 4 = 2.5 s at c = 1,
    (1 + 1 + 2 + 2) / 4 = 1.5 s at c = 2, s at c = 4."""
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", tp=1, engine="vllm-v1",
                                          draft="ngram")
    s = float(cost.prefill_time(1, 512)) * 1e-3
    t = _serve(tmp_path, _scenario(tmp_path, f'prefill_workers = {servers}\nkv_link = "none"\n'),
               "--concurrency", "4", "--workload", "fixed:512:2", "--policies", "none",
               "--max-num-batched-tokens", "1023", "--max-num-seqs", "1023")
    assert t.ttft_mean_s[0] == pytest.approx(waits * s, rel=1e-5)
    assert t.tpot_mean_s[0] < s


@pytest.mark.parametrize("servers", [1, 2, 4])
def test_the_prefill_pool_batches_prompts_sent_together(tmp_path, servers):
    """The same four clients at vLLM's default budget (8192 tokens): each request sent while a
    server is idle starts a pass of its own, the rest join the newest pass (src/disagg/
    prefill_front.py): one server runs one pass of four (TTFT s4 for all), two run one of one
    and one of three ((s1 + 3 s3) / 4), four one each (s1); s_n = prefill_time(n, 512)."""
    cost = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", tp=1, engine="vllm-v1",
                                          draft="ngram")
    s = {n: float(cost.prefill_time(n, 512)) * 1e-3 for n in (1, 3, 4)}
    want = {1: s[4], 2: (s[1] + 3 * s[3]) / 4, 4: s[1]}[servers]
    t = _serve(tmp_path, _scenario(tmp_path, f'prefill_workers = {servers}\nkv_link = "none"\n'),
               "--concurrency", "4", "--workload", "fixed:512:2", "--policies", "none")
    assert t.ttft_mean_s[0] == pytest.approx(want, rel=1e-5)
    assert s[4] < 4 * s[1]  # the batch reads the weights once: cheaper than four passes


def _timers(shape, draft="eagle3", model="qwen3-30b-a3b"):
    cost = HardwareCostModel.from_presets("h200", model, tp=shape.gpus_per_worker, ep=shape.ep,
                                          engine="sglang", draft=draft)
    return cost, StepTimer(cost, True), DecodePoolTimer(cost, True, shape)


def test_attention_dp_of_one_is_the_tp_path_bit_for_bit():
    cost, tp_path, pool = _timers(PoolShape(workers=1, tp=2, ep=2, dp=1))
    n = np.array([1, 7, 64, 0])
    ctx = np.array([100.0, 7 * 1500.5, 64 * 4000.0, 0.0])
    gamma = np.array([0, 3, 2, 1])
    for a, b in zip(pool.decode_ms_totals(n, ctx, gamma, 64),
                    tp_path.decode_ms_totals(n, ctx, gamma, 64)):
        assert np.array_equal(a, b)
    mask = np.ones((2, 5), bool)
    context = np.full((2, 5), 900)
    for a, b in zip(pool.decode_ms(mask, np.array([0, 2]), context),
                    tp_path.decode_ms(mask, np.array([0, 2]), context)):
        assert np.array_equal(a, b)
    for a, b in zip(pool.decode_ms_each_gamma(mask, context, [0, 1, 4]),
                    tp_path.decode_ms_each_gamma(mask, context, [0, 1, 4])):
        assert np.array_equal(a, b)
    assert decode_capacity_tokens(cost, pool.shape, 256) == kv_capacity_tokens(cost, 256)
    # no prefill on a decode worker: the prompt's KV arrived
    assert pool.prefill_ms(4, 1000) == 0.0


def test_the_engines_dp_steps_are_the_decode_workers():
    """At dp > 1 the serving engine's step (per-row totals) is DecodeWorker.step_ms."""
    shape = PoolShape(workers=1, tp=1, ep=8, dp=8)
    _, _, pool = _timers(shape, draft="ngram", model="deepseek-v3")
    worker = DecodeWorker(pool.cost, shape)
    for n, c in ((1, 2000.0), (33, 5000.0), (256, 8000.0)):
        t, d = pool.decode_ms_totals(np.array([n]), np.array([n * c]), np.array([0]), 256)
        assert float(t[0] + d[0]) == pytest.approx(worker.step_ms(n, c, 0), rel=1e-12)


@pytest.mark.parametrize("table, field, words", [
    ("decode_tp = 3\n", "disagg.decode_tp", "does not divide the 32 query heads"),
    ("decode_workers = 0\n", "disagg.decode_workers", "expected an integer >= 1, got 0"),
    ('kv_link = "pcie"\n', "disagg.kv_link", "allowed: auto, nvlink, network, none"),
    ("decode_gpus = 8\n", "disagg.decode_gpus", "unknown key"),
])
def test_a_bad_disagg_table_is_one_line_exit_2_nothing_written(tmp_path, table, field, words):
    out = tmp_path / "out"
    p = run_captured(["serve", "--scenario", _scenario(tmp_path, table), *QUICK,
                      "--concurrency", "1", "--out", str(out)])
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and words in lines[0]
    assert not out.exists()


def test_a_pool_that_does_not_fit_names_the_smallest_shape(tmp_path):
    text = open("configs/scenarios/disagg-deepseek-v3-mtp-2x8xh200.toml").read().replace(
        "decode_tp = 1\ndecode_ep = 8\ndecode_dp = 8",
        "decode_tp = 4\ndecode_ep = 1\ndecode_dp = 1")
    path = tmp_path / "big.toml"
    path.write_text(text)
    out = tmp_path / "out"
    p = run_captured(["serve", "--scenario", str(path), *QUICK, "--concurrency", "1",
                      "--out", str(out)])
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("error: disagg.decode_tp: ")
    assert "decode_tp 1, decode_dp 8, decode_ep 8 (the smallest shape that fits" in p.stderr
    assert not out.exists()
