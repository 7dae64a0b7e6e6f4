"""`sglang-adaptive`: SGLang's adaptive speculation (`--speculative-adaptive`) as a serve policy.

SGLang (sgl-project/sglang; files and commits as read, design.md 'SGLang's adaptive
speculation') keeps one slot per batch-size key of its adaptive config. A batch routes to the
largest key <= its size (the first key below all of them; adaptive_step_router.py @ a12239f6,
`batch_size_key_for_batch`, without the CUDA-graph padding it applies when graphs are captured),
and the slot picks speculative_num_steps among its `candidate_steps`:

* `ema` (adaptive_spec_params.py @ 015c8726, `AdaptiveStepSlot`): an EMA of the accepted drafts
  per request; at an update it drops one candidate while the EMA <= prev - 0.5 + down_hysteresis
  (0.5 + down_hysteresis when prev is 0), else rises while the EMA > current - 0.5 +
  up_hysteresis; at 0 steps it probes the next candidate. Here the EMA is taken at its limit, the
  mean accepted drafts at the slot's current steps for the workload's acceptance, and the rule is
  iterated from SGLang's initial steps to where it rests. The only cycle it can enter (with
  down_hysteresis <= up_hysteresis, as in every default) is 0 <-> the next candidate; the table
  holds 0 there (design.md states what SGLang does between).
* `throughput_aware` (throughput_aware_controller.py @ 088c5abe, throughput_aware_spec_params.py @
  23570745): score(S) = E[tokens | S] / cost_ms(batch, S), the argmax over the slot's candidates,
  E from pooled per-position acceptance, cost from a startup profile. Here E is the workload's mean
  tokens per step and the cost the cost model's step time at the workload's mean context.

Both are functions of the batch size once the acceptance is fixed, so the policy is a table of
gamma by batch size (`reads_slot_state = False`): the compiled loop runs it as it runs `schedule`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from src.acceptance import expected_tokens_per_step_profile

SGLANG_FILE = "python/sglang/srt/speculative/adaptive_spec_params.py"  # sgl-project/sglang
SGLANG_COMMIT = "015c872628e328b530880bcf95ae91222604b225"  # the version read
STRATEGIES = ("ema", "throughput_aware")  # resolve_adaptive_strategy's allowed values

# (batch-size key, candidate_steps, down_hysteresis, up_hysteresis): SGLang's
# DEFAULT_ADAPTIVE_CONFIG (adaptive_spec_params.py @ 015c8726), what a bare --speculative-adaptive
# runs; its key 64 with candidates [0] turns speculation off from 64 running requests.
EMA_DEFAULT_SLOTS = (
    (1, (1, 3, 5, 7), -0.25, 0.0),
    (8, (0, 1, 3), 0.0, 0.0),
    (32, (0, 1), 0.0, 0.0),
    (64, (0,), 0.0, 0.0),
)
# throughput_aware has no built-in config (an empty one raises in _parse_bs_candidates); this is
# the example of throughput_aware_controller.py's module docstring @ 088c5abe (steps must be > 0).
THROUGHPUT_EXAMPLE_SLOTS = (
    (1, (1, 3, 5, 7), 0.0, 0.0),
    (8, (1, 3, 5), 0.0, 0.0),
    (32, (1, 3), 0.0, 0.0),
    (128, (1,), 0.0, 0.0),
)


@dataclass(frozen=True)
class SGLangAdaptive:
    """SGLang's adaptive steps by batch size (module docstring); `table` is filled by `resolve`."""

    strategy: str = "ema"
    slots: tuple = EMA_DEFAULT_SLOTS
    table: tuple[int, ...] = ()  # gamma for batch sizes 0..max_num_seqs
    reads_slot_state: ClassVar[bool] = False  # looks at the batch size only
    speculative: bool = True
    max_segment_steps: int | None = None

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy '{self.strategy}' is not one of {', '.join(STRATEGIES)}")

    @property
    def name(self) -> str:
        return "sglang-adaptive" if self.strategy == "ema" else f"sglang-adaptive:{self.strategy}"

    def gammas(self, view) -> np.ndarray:
        if not self.table:
            raise RuntimeError("sglang-adaptive used before resolve() gave it its table")
        table = np.asarray(self.table, np.int64)
        return table[np.minimum(view.batch, table.size - 1)]


def slot_index(keys: list[int], batch_size: int) -> int:
    """SGLang's route: the largest key <= batch_size, the first key below all of them."""
    return max(0, bisect.bisect_right(keys, batch_size) - 1)


def initial_steps(slots, num_steps: int | None = None) -> list[int]:
    """Each slot's starting steps: --speculative-num-steps (default: the middle of the union of
    candidates, server_args' _init_adaptive_speculative_params) where the slot has it, else the
    middle of the slot's own candidates (AdaptiveStepSlot.__init__)."""
    union = sorted({s for _, c, _, _ in slots for s in c})
    start = union[len(union) // 2] if num_steps is None else num_steps
    out = []
    for _, cands, _, _ in slots:
        c = sorted(set(cands))
        out.append(start if start in c else c[len(c) // 2])
    return out


def ema_next(cands: list[int], steps: int, ema: float, down: float, up: float) -> int:
    """One update of AdaptiveStepSlot._recompute_params (ceiling_coeff 0, SGLang's default)."""
    i = cands.index(steps)
    if steps == 0:  # probe the next candidate after a step without drafts
        return cands[min(i + 1, len(cands) - 1)]
    start = i
    while i > 0:
        prev = cands[i - 1]
        if ema <= (0.5 if prev == 0 else prev - 0.5) + down:
            i -= 1
        else:
            break
    if i == start:
        while i < len(cands) - 1 and ema > cands[i] - 0.5 + up:
            i += 1
    return cands[i]


def ema_resting_steps(cands, start: int, accepted_at, down: float, up: float) -> int:
    """Where the EMA rule rests when the EMA equals accepted_at(steps), the mean accepted drafts
    at the current steps; in the 0 <-> next-candidate cycle, 0."""
    cands = sorted(set(cands))
    seen, s = [], start
    while s not in seen:
        seen.append(s)
        s = ema_next(cands, s, accepted_at(s) if s > 0 else -1.0, down, up)
    return min(seen[seen.index(s):])


def resolve(policy: SGLangAdaptive, alphas: np.ndarray, profile: np.ndarray | None,
            by_gamma: np.ndarray, max_gamma: int) -> SGLangAdaptive:
    """The policy with its table for batch sizes 0..by_gamma.shape[1] - 1.

    by_gamma[g, B] is the cost model's steady-state speedup of gamma g at batch B
    (policies.steady_state_gammas: Omega_h(g) T_AR(B) / cost(B, g), Omega_h the harmonic mean of
    E[K + 1] over the workload); candidates above max_gamma are capped at it."""
    alphas = np.asarray(alphas, float)
    tokens = {g: np.asarray(expected_tokens_per_step_profile(alphas, g, profile), float)
              for g in range(1, max_gamma + 1)}
    keys = [k for k, _, _, _ in policy.slots]
    starts = initial_steps(policy.slots)
    resting = []
    for (_, cands, down, up), start in zip(policy.slots, starts):
        capped = sorted({min(c, max_gamma) for c in cands})
        if policy.strategy == "ema":
            resting.append(ema_resting_steps(capped, min(start, max_gamma),
                                             lambda s: float(tokens[s].mean()) - 1.0, down, up))
        else:
            resting.append(tuple(capped))
    n = by_gamma.shape[1]
    table = np.zeros(n, np.int64)
    for b in range(n):
        choice = resting[slot_index(keys, max(b, 1))]
        if policy.strategy == "ema":
            table[b] = choice
        else:  # score E_mean(g) / cost(b, g) = by_gamma * E_mean * mean(1 / E) / T_AR
            score = [by_gamma[g, b] * tokens[g].mean() * np.mean(1.0 / tokens[g]) for g in choice]
            table[b] = choice[int(np.argmax(score))]  # ties: the smaller, as pick_best_step
    return replace(policy, table=tuple(int(g) for g in table))


def resolve_policies(policies, alphas, profile, by_gamma, max_gamma) -> list:
    """The policies with every SGLangAdaptive given its table (the others as they are)."""
    return [resolve(p, alphas, profile, by_gamma, max_gamma) if isinstance(p, SGLangAdaptive)
            else p for p in policies]
