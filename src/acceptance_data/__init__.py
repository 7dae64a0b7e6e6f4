"""Acceptance as engines report it, turned into quality modes of the study.

vllm_metrics: a saved vLLM /metrics text (one snapshot, or two for a window) -> per-position rates.
sglang: SGLang's mean acceptance length at a known draft length -> an i.i.d. per-token rate.
tree_length: the same measured on a token tree S:K:N (--shape-measured) -> the chain's rate.
traces: a per-request acceptance trace CSV -> a per-position mode with empirical per-request spread,
        and the i.i.d. fit of the same trace for comparison.
Each reader raises src.config.ConfigError (one line: the option, the problem, what was expected).
"""
