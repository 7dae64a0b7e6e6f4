"""`recommend`'s SGLang adaptive-speculation answer: the project's schedule as SGLang's
`--speculative-adaptive-config`, one candidate step per batch-size key, and the cases SGLang
declines it.

SGLang (adaptive_spec_params.py @ 015c8726, `_load_adaptive_config` and `AdaptiveStepSlot`) reads a
JSON object from a file path (--speculative-adaptive-config is "Path to a JSON config file",
server_args): integer-string keys are batch-size lower bounds, each holding `candidate_steps`
(non-negative ints) and optional knobs; the top-level `strategy` picks `ema` or
`throughput_aware`. One candidate per key leaves the EMA nothing to move to, so SGLang runs the
schedule's K at each batch size: the per-batch-size schedule in the only form SGLang takes one.
"""

from __future__ import annotations

import json

from src.online.sglang_adaptive import SGLANG_COMMIT, SGLANG_FILE

CONFIG_FILE = "sglang_adaptive.json"
# adaptive_unsupported_reason (adaptive_spec_params.py @ 015c8726): SGLang logs
# "speculative_adaptive disabled: ..." and serves its static speculative params
# (_maybe_disable_adaptive, arg_groups/speculative_hook.py @ d9ccf6a7) when any of these holds.
SUPPORTED_ALGORITHMS = ("EAGLE", "EAGLE3")
DECLINED_WHEN = ("attention DP (--enable-dp-attention)", "--speculative-eagle-topk other than 1",
                 "--enable-multi-layer-eagle", "--enable-two-batch-overlap", "--enable-pdmux",
                 "strategy throughput_aware with --pp-size > 1")


def adaptive_config(ranges) -> dict:
    """The config JSON object of vLLM-form [low, high, K] ranges (the schedule recommend prints)."""
    out: dict = {"strategy": "ema"}
    for lo, _, k in sorted(ranges):
        out[str(int(lo))] = {"candidate_steps": [int(k)]}
    return out


def adaptive_lines(kind: str, ranges, launch: str | None) -> list[str]:
    """The lines recommend prints under SGLang: the config file and the launch command, or one
    line saying why SGLang declines adaptive speculation for this draft's algorithm.

    kind: the draft's kind (src/hardware/moe_report.draft_kind, or ngram); launch: the
    launch_server command with the model, tp and draft flags (None where not supported)."""
    from src.hardware.moe_report import SGLANG_ALGORITHM
    algorithm = {**SGLANG_ALGORITHM, "ngram": "NGRAM"}.get(kind, kind)
    head = ("SGLang adaptive speculation (gamma by batch size; sgl-project/sglang "
            f"{SGLANG_FILE} @ {SGLANG_COMMIT[:8]}")
    if algorithm not in SUPPORTED_ALGORITHMS or launch is None:
        return [f"{head}): not printed, SGLang takes --speculative-adaptive for "
                f"{'/'.join(SUPPORTED_ALGORITHMS)} only and would serve {algorithm} with "
                "static params."]
    text = json.dumps(adaptive_config(ranges))
    return [
        f"{head}):",
        f"  cat > {CONFIG_FILE} <<'EOF'",
        f"  {text}",
        "  EOF",
        f"  {launch} --speculative-eagle-topk 1 --speculative-adaptive "
        f"--speculative-adaptive-config {CONFIG_FILE}",
        "  (the flag takes a file path, not inline JSON; each key is a batch-size lower bound "
        "with one candidate, so the EMA keeps the schedule's K; SGLang compares keys to the "
        "batch size padded to its captured CUDA-graph sizes)",
    ] + ([f"  (candidate 0 from batch {off[0]}: speculation off there, which the static flags "
          "cannot do)"] if (off := [lo for lo, _, k in sorted(ranges) if k == 0]) else []) + [
        "  (SGLang ignores --speculative-adaptive, with a warning, and serves static params "
        f"under: {'; '.join(DECLINED_WHEN)})",
    ]
