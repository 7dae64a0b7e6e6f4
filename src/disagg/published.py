"""A published measurement of speculation on a disaggregated deployment, beside the model.

SGLang issue #7927 ("Lower Accept Length with PD + MTP Compared to MTP Only",
github.com/sgl-project/sglang/issues/7927, 2025-07-10, closed): DeepSeek-V3 on SGLang with its
MTP module drafting through the EAGLE worker (--speculative-algorithm EAGLE
--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4: a chain of
3 drafts per verification), sglang.bench_serving random 2500 prompt / 300 output tokens. SGLang's
mean accept length (tau = E[K + 1], src/acceptance_data/sglang.py):

    aggregated, TP 4, MTP only                 3.19
    PD disaggregated (decode TP 2, Mooncake)   1.98

The model: acceptance belongs to the draft and the text, so a disaggregated decode pool accepts
what an aggregated replica does; DeepSeek-V3's MTP rule (src/acceptance.py: 0.875 at the MTP
layer's position, x0.83 per reused position) gives tau = 2.89 at 3 drafts, 9% under the
aggregated measurement and 46% over the disaggregated one. The PD figure is a finding the model
does not carry: an engine-side loss on the PD path. SGLang PR #7242 ("Transfer hidden states for
mtp when disaggregation", merged 2025-06) names one such path: the decode instance drafted its
first MTP step from random hidden states because the prefill did not send them; that touches
only the first verification of each request (~1 of ~100 here), so it alone would not explain
the drop, and the issue's text as stored names no other cause (a doubt).

What the drop costs, on the model (the committed disagg-deepseek-v3-mtp-2x8xh200 scenario:
prefill 1 x TP 8, decode 1 x DP 8 EP 8, at the issue's 2500 / 300 tokens, 64 clients, 3 drafts
at the i.i.d. rate of each tau): `speedups()`.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

ISSUE_7927 = {
    "source": "github.com/sgl-project/sglang/issues/7927 (2025-07-10)",
    "model": "deepseek-v3",
    "drafts": 3,  # --speculative-num-steps 3, topk 1
    "isl": 2500,
    "osl": 300,
    "tau_aggregated": 3.19,  # MTP only, TP 4
    "tau_disaggregated": 1.98,  # PD + MTP, decode TP 2
}
SCENARIO = Path(__file__).resolve().parents[2] / "configs" / "scenarios" / (
    "disagg-deepseek-v3-mtp-2x8xh200.toml")


def predicted_tau(drafts: int = ISSUE_7927["drafts"]) -> float:
    """The model's accept length of DeepSeek-V3's MTP at `drafts` drafts (the reuse rule), the
    same aggregated and disaggregated."""
    from src.acceptance import expected_tokens_per_step_mtp
    return float(expected_tokens_per_step_mtp(0.875, 1, drafts))


def speedups(concurrency: int = 64, scenario_path=SCENARIO) -> dict[float, float]:
    """{tau: greedy TPOT / speculative TPOT} on the scenario's pools for the two measured taus
    (closed_loop.estimate, the i.i.d. rate that gives tau at 3 drafts)."""
    from src.acceptance import iid_alpha_from_tokens_per_step
    from src.attention_dp.worker import DecodeWorker
    from src.disagg.closed_loop import estimate
    from src.disagg.scenario import load_disagg_scenario
    sc, dis = load_disagg_scenario(scenario_path)
    pre, dec = dis.prefill, dis.decode
    prefill_cost = replace(sc, tp=pre.gpus_per_worker, ep=pre.ep).cost_model()
    worker = DecodeWorker(replace(sc, tp=dec.gpus_per_worker, ep=dec.ep).cost_model(), dec)
    k, isl, osl = ISSUE_7927["drafts"], ISSUE_7927["isl"], ISSUE_7927["osl"]
    greedy = estimate(prefill_cost, worker, dis, isl, osl, concurrency).tpot_ms
    out = {}
    for tau in (ISSUE_7927["tau_aggregated"], ISSUE_7927["tau_disaggregated"]):
        alpha = iid_alpha_from_tokens_per_step(tau, k)
        spec = estimate(prefill_cost, worker, dis, isl, osl, concurrency, gamma=k,
                        alphas=np.array([alpha]))
        out[tau] = greedy / spec.tpot_ms
    return out
