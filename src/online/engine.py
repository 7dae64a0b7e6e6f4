"""The serving engine: open-loop arrivals, continuous batching, chunked prefill, paged KV cache.

One simulator for greedy and speculative serving. Each row (one replication under one policy at
one rate) has its own requests, clock and random streams; rows do not interact. What one engine
step does, per row (vLLM V1's scheduler, `vllm/v1/core/sched/scheduler.py`, in the order it
schedules):

1. The policy picks gamma for the step from the state at its start (batch = running sequences).
   gamma is capped so the decode/verification positions fit the token budget:
   n_decode (gamma + 1) <= max_num_batched_tokens.
2. Running sequences are scheduled first: each decoding one needs gamma + 1 positions and KV slots
   for them (speculation's lookahead slots; a token tree's step N, src/treesim/serving.py, and no
   tree where N per sequence exceed the budget); each one still in prefill takes the next chunk
   of its prompt from what is left of the token budget (slot order). If the KV blocks they need
   exceed the GPU's capacity, the most recently admitted running request is preempted (its KV
   freed; it goes back to the front of the queue and later recomputes prompt + tokens generated
   so far), repeatedly until the rest fit. vLLM's default preemption mode is recomputation.
3. If nothing was preempted, waiting requests are admitted first come, first served while a slot
   is free (running < max_num_seqs), token budget is left and the KV cache has blocks for their
   first chunk (chunked prefill: a long prompt is spread over several steps).
4. The step's time is the cost model's: the target pass over the decode/verification positions and
   the prefill chunks, plus the draft passes (src/online/steptime.py).
5. Each decoding sequence commits K + 1 tokens (K accepted drafts, geometric, capped at gamma,
   or the per-position law when the requests carry a hazard profile; K = 0 without speculation),
   capped at what it still needs; a sequence whose prompt prefill ends in this step samples its
   first token (its time to first token). Finished requests leave.

That is the `chunked` scheduler. A deployment whose engine profile says `prefill_scheduling =
"prefill_first"` (vLLM v0's default scheduler without chunked prefill; vllm-2024) runs instead:
if the next waiting request (a preempted one first) has arrived, a slot is free and its whole
prompt (+ tokens generated before a preemption) fits the token budget and the KV blocks the
running requests hold, the step is a prefill-only step of whole prompts admitted first come,
first served while they fit (gamma 0, no sequence decodes); otherwise a decode step (steps 1, 2,
4, 5, admitting nothing). The token budget must hold the longest request (ValueError).

Each request's j-th verification uses draw j of its own counter-based stream
(src/online/counter_rng.py), whatever the policy and however the steps are grouped, so every
policy sees the same acceptance draws (common random numbers).

Two implementations of this one model:
* compiled (src/online/engine_compiled.py, engine_loop.py, step_prices.py, kernel_attention.py):
  numba, row after row, one step at a time; the default wherever it applies (`compiled_supported`:
  batch-size policies, `adaptive` and token trees `tree:S:K:N`).
* numpy (src/online/engine_numpy.py, stretch.py): all rows side by side as [rows, slots] arrays,
  a stretch of decode steps at once where a row has nothing to admit; the reference, and the
  engine for what the compiled loop does not run (a policy reading the slots other than
  `adaptive` and the trees). `adaptive` there holds its gamma through a
  stretch of up to 8 steps; the compiled loop re-decides it every step.

Interface (what src/online/study.py, policies.py, recommend.py and the capacity search call):
`Engine(requests: RequestTable, groups: [RowGroup], deployments: [Deployment], row_deployment:
int[rows], limits: EngineLimits, max_gamma, compiled=None, **numpy_options).run(progress=None)
-> EngineResult`. RowGroup's policy has `gammas(view: PolicyView) -> int[r]`, a
`reads_slot_state` class flag and `speculative`; `compiled=True` insists on the compiled loop
(ValueError where it does not apply), False runs numpy (numpy_options: segment_work,
max_segment_steps, allow_segments).

Times are in ms inside the engine and in seconds at its edges (arrivals, results).
"""

from __future__ import annotations

from src.online.engine_compiled import CompiledEngine, compiled_supported
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


def Engine(requests: RequestTable, groups: list[RowGroup], deployments: list[Deployment],  # noqa: N802
           row_deployment, limits: EngineLimits, max_gamma: int, compiled: bool | None = None,
           **numpy_options):
    """The engine for these rows: compiled where it applies (and no numpy option is given),
    else numpy; see the module docstring."""
    ok = compiled_supported(groups, deployments)
    if compiled is None:
        compiled = ok and not numpy_options
    if compiled:
        if not ok or numpy_options:
            raise ValueError("the compiled engine runs batch-size policies, adaptive and "
                             "token trees, without numpy options")
        return CompiledEngine(requests, groups, deployments, row_deployment, limits, max_gamma)
    return NumpyEngine(requests, groups, deployments, row_deployment, limits, max_gamma,
                       **numpy_options)
