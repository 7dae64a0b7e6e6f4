"""recommend's CUDA-graph line for vLLM: the capture size the printed schedule needs, whether
vLLM's default covers it, and the flag that sets it (src/costmodel/cudagraph_sizes.py has vLLM's
rule and the version it is read from).

A step of a range [low, high, K] verifies up to high x (K + 1) tokens (high capped at
max_num_seqs); vLLM replays a CUDA graph only for passes of at most max_cudagraph_capture_size
tokens and runs the others eagerly (vLLM issue #54933: 25 vs 133 tok/s on a 42-token verification
that ran eagerly).
"""
from __future__ import annotations

import json

from src.costmodel.cudagraph_sizes import (
    VLLM_CAPTURE_CONFIG_KEY,
    VLLM_CAPTURE_FLAG,
    VLLM_DEFAULT_CAPTURE_CEILING,
    smallest_covering_size,
    vllm_max_capture_size,
)

VLLM_CAPTURE_VERSION = "vLLM at commit 09f030ea, vllm/config/vllm.py _set_cudagraph_sizes"


def widest_step(ranges, max_num_seqs: int, num_speculative_tokens: int,
                speculative_only: bool = False) -> tuple[int, int, int]:
    """(tokens, batch, K) of the widest step of a schedule's [low, high, K] ranges: the largest
    min(high, max_num_seqs) x (min(K, num_speculative_tokens) + 1); speculative_only: over the
    ranges with K > 0 ((0, 0, 0) where there is none)."""
    best = (0, 0, 0)
    for low, high, k in ranges:
        k = min(k, num_speculative_tokens)
        if (speculative_only and k == 0) or low > max_num_seqs:
            continue
        batch = min(high, max_num_seqs)
        best = max(best, (batch * (k + 1), batch, k))
    return best


def first_eager_batch(ranges, max_num_seqs: int, num_speculative_tokens: int,
                      capture_tokens: int) -> tuple[int, int] | None:
    """(batch, K) of the smallest batch whose step verifies more than capture_tokens tokens
    (None: every step up to max_num_seqs stays within)."""
    for low, high, k in sorted(ranges):
        k = min(k, num_speculative_tokens)
        batch = max(low, capture_tokens // (k + 1) + 1)
        if batch <= min(high, max_num_seqs):
            return batch, k
    return None


def capture_lines(cfg, schedule) -> list[str]:
    """The lines recommend prints under the vLLM V1 command."""
    lim = cfg.limits
    m, k_max = lim.max_num_seqs, schedule.num_speculative_tokens
    need, batch, k = widest_step(schedule.ranges, m, k_max)
    spec_need, spec_batch, spec_k = widest_step(schedule.ranges, m, k_max, True)
    default = vllm_max_capture_size(m, k_max, lim.max_num_batched_tokens)
    user = getattr(cfg.scenario, "max_cudagraph_capture_size", None)
    have = default if user is None else vllm_max_capture_size(m, k_max, lim.max_num_batched_tokens,
                                                              user)
    spec = (f"; its speculative ranges {spec_batch} x {spec_k + 1} = {spec_need}" if spec_need
            and spec_need != need else "")
    lines = [f"  CUDA graphs ({VLLM_CAPTURE_VERSION}): the schedule's widest step is {batch} "
             f"requests x {k + 1} tokens = {need} tokens (batch x (K + 1){spec}); vLLM captures "
             f"up to min(2 x max_num_seqs {m} x (1 + {k_max}), {VLLM_DEFAULT_CAPTURE_CEILING}) "
             f"= {default} tokens by default"
             + ("" if user is None else f", {have} with {VLLM_CAPTURE_FLAG} {user}")]
    if need <= have:
        lines[0] += ", which covers it."
        return lines
    first, first_k = first_eager_batch(schedule.ranges, m, k_max, have)
    lines[0] += (f": steps over {have} tokens, from batch {first} at K {first_k}, run without "
                 "CUDA graphs (the cost model prices them eagerly).")
    size = smallest_covering_size(need)
    if size > lim.max_num_batched_tokens:
        lines.append(f"  vLLM caps the capture size at max_num_batched_tokens "
                     f"({lim.max_num_batched_tokens}): raise --max-num-batched-tokens to {size} "
                     f"as well to capture them.")
    lines.append(f"  To capture them add {VLLM_CAPTURE_FLAG} {size} (or --compilation-config "
                 f"'{json.dumps({VLLM_CAPTURE_CONFIG_KEY: size})}'); vLLM truncates a size off "
                 "its grid (1, 2, 4, multiples of 8 below 256, of 16 above) down to the grid "
                 "(vLLM issue #54933), and each graph takes GPU memory and start-up time.")
    return lines
