"""The serving section of summary.txt for a closed-loop run (`serve --concurrency`).

A by-concurrency run has no arrival rate, so the by-rate section's steadiness test, SLO capacity
and plots do not apply; this section reports what `vllm bench serve --max-concurrency` and
`sglang.bench_serving --max-concurrency` print, per policy and concurrency C: mean TTFT, mean
TPOT, output tokens/s (per GPU: / tp) and tokens/s per user (1 / mean TPOT), each with its
interval over replications, and the TPOT speedup over `none` at the same C,
speedup = TPOT_mean(none) / TPOT_mean(policy). A disaggregated run's table (src/disagg/serve.py)
adds the prefill pool's and the decode worker's utilisation.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from src.online.text_table import aligned_table as _table
from src.online.text_table import value_ci_text as _ci


def concurrency_section(table: pd.DataFrame, cfg, begin: str, end: str) -> str:
    """The section between the lines `begin` and `end` for a closed-loop run's `table`."""
    sc = cfg.scenario
    per_run = int(table.requests.iloc[0] / cfg.replications)
    lines = [
        begin,
        f"Deployment: {sc.name} ({sc.target_model_id} + draft {sc.draft} on {sc.gpu_id}, tp "
        f"{sc.tp}), engine profile {cfg.engine_profile}.",
        f"Closed loop (serve --concurrency): C clients, each sending its next request when its "
        f"last one finishes; workload {cfg.workload}; {cfg.replications} replications x "
        f"{per_run} requests per (policy, C), each from an empty engine; values are means over "
        f"replications with {cfg.confidence:.0%} intervals [low, high].",
        "C1. By policy and concurrency: mean TTFT (ms), mean TPOT (ms), output tokens/s per GPU, "
        "tokens/s per user (1 / mean TPOT), and the TPOT speedup over none at the same C.",
    ]
    pools = "prefill_utilisation" in table.columns
    if pools:
        lines[-1] += (" Disaggregated: tokens/s per GPU over both pools' GPUs; the prefill pool's "
                      "and the decode worker's utilisation.")
    rows = []
    none = table[table.policy == "none"].set_index("concurrency")
    for _, row in table.sort_values(["concurrency"], kind="stable").iterrows():
        base = none.tpot_mean_ms.get(row.concurrency, np.nan)
        speedup = base / row.tpot_mean_ms if np.isfinite(base) else np.nan
        rows.append([f"{int(row.concurrency)}", row.policy, _ci(row, "ttft_mean_ms", 1),
                     _ci(row, "tpot_mean_ms", 2), _ci(row, "output_tok_s_per_gpu", 0),
                     _ci(row, "output_tok_s_per_user", 1),
                     "-" if not np.isfinite(speedup) else f"{speedup:.2f}x"]
                    + ([f"{row.prefill_utilisation:.0%}", f"{row.decode_utilisation:.0%}"]
                       if pools else []))
    lines.append(_table(["C", "policy", "TTFT mean ms", "TPOT mean ms", "tok/s/GPU",
                         "tok/s/user", "speedup"] + (["prefill", "decode"] if pools else []),
                        rows))
    lines.append(end)
    return "\n".join(lines)
