"""The serving engine's data: its limits, deployments, requests, row groups, results and the
view a speculation policy decides from (src/online/engine.py describes the engine)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from src.online.steptime import StepTimer

# ITL histogram: log-spaced bins from 0.01 ms to 100 s, 200 per decade (about 1.2% wide)
ITL_BIN_EDGES_MS = np.logspace(-2, 5, 7 * 200 + 1)


@dataclass(frozen=True)
class EngineLimits:
    """Scheduler limits (vLLM names): defaults are vLLM V1's for an OpenAI-compatible server on a
    GPU with >= 70 GiB (H100, H200): max_num_seqs 1024, max_num_batched_tokens 8192
    (`EngineArgs.get_batch_defaults`, vllm/engine/arg_utils.py); KV block size 16 tokens."""

    max_num_seqs: int = 1024
    max_num_batched_tokens: int = 8192
    block_size_tokens: int = 16


@dataclass(frozen=True)
class Deployment:
    """One way of serving the model: the step-time model and the KV cache it leaves."""

    timer: StepTimer
    kv_capacity_blocks: int  # KV-cache blocks of block_size_tokens (target + draft caches)

    @property
    def speculative(self) -> bool:
        return self.timer.speculative

    @property
    def prefill_first(self) -> bool:
        """Whether its engine profile schedules whole prompts in prefill-only steps that go
        before decoding (`prefill_scheduling = "prefill_first"`, vLLM v0's default scheduler)
        instead of vLLM V1's chunked prefill."""
        engine = getattr(self.timer, "engine", None)
        return getattr(engine, "prefill_scheduling", "chunked") == "prefill_first"


@dataclass(frozen=True)
class RequestTable:
    """Requests of every row, [rows, N]; rows with fewer requests pad with arrival_s = inf."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 1
    alpha: np.ndarray  # per-token acceptance probability, 0 < alpha < 1
    key: np.ndarray  # uint64: the request's acceptance stream (src/online/counter_rng.py)
    # shape D_1..D_max_gamma of a per-position mode's acceptance (src/acceptance.py), shared by
    # every row; alpha is then each request's representative rate. None: i.i.d. acceptance.
    hazard_profile: np.ndarray | None = None
    # [rows] closed-loop clients of each row (0: open loop, the arrival times as given). A row of
    # C > 0 clients sends requests 0..C-1 at their arrival_s (0) and request k >= C when the
    # (k - C + 1)-th of its earlier requests finishes (a client sends its next request as soon
    # as its last one ends); arrival_s then only marks which requests exist (finite).
    clients: np.ndarray | None = None

    @property
    def n_requests(self) -> np.ndarray:
        return np.isfinite(self.arrival_s).sum(axis=1)


def initial_arrivals_ms(requests: RequestTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_ms [rows, N], released [rows], closed [rows]): the engine's arrival times at the
    start, requests not yet sent by a closed-loop client at +inf; released[r] = the requests of
    row r sent so far (its first min(C, n) for C clients, all of an open-loop row's)."""
    arrival_ms = requests.arrival_s * 1e3
    n = requests.n_requests.astype(np.int64)
    released = n.copy()
    closed = np.zeros(n.size, bool)
    if requests.clients is not None:
        c = np.asarray(requests.clients, np.int64)
        closed = c > 0
        released = np.where(closed, np.minimum(c, n), n)
        later = np.arange(arrival_ms.shape[1])[None, :] >= released[:, None]
        arrival_ms = np.where(closed[:, None] & later & np.isfinite(arrival_ms), np.inf,
                              arrival_ms)
    return arrival_ms, released, closed


def sent_arrivals_s(requests: RequestTable, arrival_ms: np.ndarray,
                    closed: np.ndarray) -> np.ndarray:
    """Each request's arrival (s) as the engine sent it, NaN where no request: a closed-loop
    row's from the engine (its finish times), an open-loop row's as given (the same floats)."""
    valid = np.isfinite(requests.arrival_s)
    sent = np.where(closed[:, None], arrival_ms * 1e-3, requests.arrival_s)
    return np.where(valid, sent, np.nan)


@dataclass
class RowGroup:
    """Rows served under one policy: policy.gammas(view) decides their gamma each step."""

    policy: object
    rows: np.ndarray  # int row indices


@dataclass
class EngineResult:
    """Per request ([rows, N], NaN where no request) and per row ([rows]) outcomes; times in s."""

    arrival_s: np.ndarray
    first_scheduled_s: np.ndarray  # start of the first step that scheduled the request
    first_token_s: np.ndarray  # end of the step that sampled its first token
    finish_s: np.ndarray  # end of the step that committed its last token
    output_tokens: np.ndarray
    preemptions: np.ndarray  # times the request was preempted
    makespan_s: np.ndarray  # first arrival (0) to the last finish
    steps: np.ndarray  # engine steps
    busy_s: np.ndarray  # time the engine spent in steps
    running_integral_s: np.ndarray  # integral over time of the running (scheduled) sequences
    kv_integral_s: np.ndarray  # integral over time of the KV-cache fraction in use
    accepted_drafts: np.ndarray
    proposed_drafts: np.ndarray
    decode_steps_by_gamma: np.ndarray  # [rows, max_gamma + 1] steps that verified with gamma g
    itl_histogram: np.ndarray  # [rows, len(ITL_BIN_EDGES_MS) - 1] counts of inter-token gaps
    kv_capacity_blocks: np.ndarray
    slot_steps: np.ndarray | None = None  # [rows] sum over steps of the running sequences


@dataclass
class PolicyView:
    """What a policy may look at when it picks gamma for its rows (all from the past). The slot
    state (context, accepted, tested, pooled_*) is None for a policy whose class sets
    `reads_slot_state = False` (one that looks at the batch size only)."""

    batch: np.ndarray  # [r] sequences running (decode + prefill) at the step's start
    decoding: np.ndarray  # [r, W] slot is decoding
    context: np.ndarray  # [r, W] cached tokens of each slot
    accepted: np.ndarray  # [r, W] drafts accepted so far by the slot's request
    tested: np.ndarray  # [r, W] drafts tested so far (accepted + rejections seen)
    pooled_accepted: np.ndarray  # [r] the same summed over every request of the row so far
    pooled_tested: np.ndarray  # [r]
    timer: StepTimer
    max_gamma: int  # the largest gamma the deployment runs


def check_prefill_first(longest: np.ndarray, prefill_first: np.ndarray,
                        limits: EngineLimits) -> None:
    """Prefill-first scheduling prefills whole prompts (a recomputed one with its generated
    tokens), as vLLM v0 without chunked prefill, which requires max_num_batched_tokens >=
    max_model_len: ValueError where a row's longest request exceeds the token budget."""
    if np.any(np.asarray(longest)[np.asarray(prefill_first, bool)]
              > limits.max_num_batched_tokens):
        raise ValueError("prefill-first scheduling needs max_num_batched_tokens >= the longest "
                         "request (prompt + output tokens)")
