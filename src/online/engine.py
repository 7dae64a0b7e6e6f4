"""The serving engine: open-loop arrivals, continuous batching, chunked prefill, paged KV cache.

One simulator for greedy and speculative serving. Many independent rows run side by side as rows
of [rows, slots] arrays (a row = one replication under one policy at one rate); each row has its
own clock. What one engine step does, per row (vLLM V1's scheduler, `vllm/v1/core/sched/
scheduler.py`, in the order it schedules):

1. The policy picks gamma for the step from the state at its start (batch = running sequences).
   gamma is capped so the decode/verification positions fit the token budget:
   n_decode (gamma + 1) <= max_num_batched_tokens.
2. Running sequences are scheduled first: each decoding one needs gamma + 1 positions and KV slots
   for them (speculation's lookahead slots); each one still in prefill takes the next chunk of its
   prompt from what is left of the token budget (slot order). If the KV blocks they need exceed
   the GPU's capacity, the most recently admitted running request is preempted (its KV freed; it
   goes back to the front of the queue and later recomputes prompt + tokens generated so far),
   repeatedly until the rest fit. vLLM's default preemption mode is recomputation.
3. If nothing was preempted, waiting requests are admitted first come, first served while a slot
   is free (running < max_num_seqs), token budget is left and the KV cache has blocks for their
   first chunk (chunked prefill: a long prompt is spread over several steps).
4. The step's time is the cost model's: the target pass over the decode/verification positions and
   the prefill chunks, plus the draft passes (src/online/steptime.py).
5. Each decoding sequence commits K + 1 tokens (K accepted drafts, geometric, capped at gamma,
   or the per-position law when the requests carry a hazard profile; K = 0 without speculation),
   capped at what it still needs; a sequence whose prompt prefill ends in this step samples its
   first token (its time to first token). Finished requests leave.

Between events nothing changes but the contexts: when a row has no prefill in progress and no
request it could admit, the engine advances it through a whole stretch of decode steps at once (up
to the next arrival, the first request to finish, or the KV cache filling up), computing every
step of the stretch exactly as single steps would (same draws: each request's j-th verification
uses draw j of its own counter-based stream, src/online/counter_rng.py). This is what makes low
rates cheap: there, most steps are such stretches.

Times are in ms inside the engine and in seconds at its edges (arrivals, results).
"""

from __future__ import annotations

from src.online.engine_numpy import NumpyEngine
from src.online.engine_types import (  # noqa: F401  (the engine's interface)
    ITL_BIN_EDGES_MS,
    Deployment,
    EngineLimits,
    EngineResult,
    PolicyView,
    RequestTable,
    RowGroup,
)
from src.online.stretch import percentile_75  # noqa: F401

Engine = NumpyEngine
