"""Speculation policies: how many draft tokens (gamma) each engine step proposes.

Every policy sees only the past (`PolicyView`: the batch at the step's start, each running
request's acceptance observed so far, the cost model) and returns one gamma per row for the whole
batch, as vLLM and SGLang run it (one draft length per step).

* `none`: no speculation; served without a draft network (its weights and KV cache do not take
  GPU memory).
* `fixed:G`: gamma = G every step.
* `schedule`: gamma looked up by batch size (requests scheduled in the step) in a table of
  vLLM's `num_speculative_tokens_per_batch_size` form: a list of [low, high, K] inclusive ranges;
  the first starts at 1; a batch size in a gap takes the K of the range before it, one past the last
  range the last K; every K is capped at num_speculative_tokens (vllm/v1/spec_decode/dynamic/
  utils.py, `build_dynamic_sd_schedule_lookup`). The default table is the cost model's steady-state
  optimum for the workload (`steady_state_schedule`).
* `adaptive`: each step, the gamma that maximises goodput, the expected tokens the batch commits per
  unit time (SmartSpec, Liu et al. 2024, arXiv 2406.14066; the batch-uniform form that vLLM's
  dynamic speculative decoding implements, vllm/v1/spec_decode/dynamic/manager.py):

      gamma* = argmax_g  sum_i E_i(g) / (T_draft(g) + T_verify(g)),
      E_i(g) = (1 - a_i^(g+1)) / (1 - a_i)

  with a_i the request's acceptance estimated from its own past steps (accepted / tested drafts,
  shrunk towards the row's pooled estimate with `prior_tokens` pseudo-observations) and the step
  times from the cost model at the batch's current contexts; g = 0 is plain decoding. Under a
  per-position mode (rates that fall along the draft) this i.i.d. estimate is misspecified, as a
  real engine's would be: it is kept as the policy an engine without per-position knowledge runs.
* `off-above:N[:G]`: gamma = G while at most N sequences run, else 0 (vLLM v0's
  `speculative_disable_by_batch_size`); G defaults to the workload's best batch-1 gamma.
* `sglang-adaptive[:ema|:throughput_aware]`: SGLang's `--speculative-adaptive`, its candidate
  steps by batch size and its strategy (src/online/sglang_adaptive.py); `ema` with SGLang's
  default config, off from 64 running requests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from src.acceptance import expected_tokens_per_step, expected_tokens_per_step_profile
from src.config import ConfigError, list_items
from src.errors import ascii_int


@dataclass(frozen=True)
class NoSpeculation:
    name: str = "none"
    reads_slot_state: ClassVar[bool] = False  # looks at the batch size only
    speculative: bool = False
    max_segment_steps: int | None = None

    def gammas(self, view) -> np.ndarray:
        return np.zeros(view.batch.size, np.int64)


@dataclass(frozen=True)
class FixedGamma:
    gamma: int
    reads_slot_state: ClassVar[bool] = False  # looks at the batch size only
    speculative: bool = True
    max_segment_steps: int | None = None

    @property
    def name(self) -> str:
        return f"fixed:{self.gamma}"

    def gammas(self, view) -> np.ndarray:
        return np.full(view.batch.size, self.gamma, np.int64)


@dataclass(frozen=True)
class BatchSchedule:
    """A vLLM `num_speculative_tokens_per_batch_size` table (module docstring)."""

    ranges: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int
    name: str = "schedule"
    reads_slot_state: ClassVar[bool] = False  # looks at the batch size only
    speculative: bool = True
    max_segment_steps: int | None = None

    def lookup(self, max_batch: int) -> np.ndarray:
        """gamma for batch sizes 0..max_batch (vLLM's dense lookup; index 0 unused)."""
        dense = np.zeros(max_batch + 1, np.int64)
        next_bs, last_k = 1, None
        for lo, hi, k in sorted(self.ranges):
            if lo > next_bs and last_k is not None:
                dense[next_bs : min(lo, max_batch + 1)] = min(self.num_speculative_tokens, last_k)
            dense[max(lo, next_bs) : min(hi, max_batch) + 1] = min(self.num_speculative_tokens, k)
            next_bs, last_k = max(next_bs, hi + 1), k
            if next_bs > max_batch:
                break
        if last_k is not None and next_bs <= max_batch:
            dense[next_bs:] = min(self.num_speculative_tokens, last_k)
        return dense

    def gammas(self, view) -> np.ndarray:
        table = self.lookup(int(max(view.batch.max(), 1)))
        return table[view.batch]

    def vllm_json(self) -> str:
        """The `--speculative-config` fields vLLM reads for this schedule."""
        return json.dumps(
            {
                "num_speculative_tokens": self.num_speculative_tokens,
                "num_speculative_tokens_per_batch_size": [list(r) for r in self.ranges],
            }
        )


@dataclass(frozen=True)
class OffAbove:
    max_running: int
    gamma: int
    reads_slot_state: ClassVar[bool] = False  # looks at the batch size only
    speculative: bool = True
    max_segment_steps: int | None = None

    @property
    def name(self) -> str:
        return f"off-above:{self.max_running}"

    def gammas(self, view) -> np.ndarray:
        return np.where(view.batch <= self.max_running, self.gamma, 0).astype(np.int64)


@dataclass(frozen=True)
class Adaptive:
    """Goodput-maximising gamma per step (module docstring)."""

    max_gamma: int
    prior_alpha: float = 0.5  # pooled estimate before any draft was tested
    prior_tokens: float = 8.0  # pseudo-observations behind each request's prior
    name: str = "adaptive"
    reads_slot_state: ClassVar[bool] = True  # reads the slots' contexts and acceptance counts
    speculative: bool = True
    max_segment_steps: int | None = 8  # re-decide at least every 8 decode steps

    def alpha_estimates(self, view) -> np.ndarray:
        """[r, W] acceptance estimate of each slot's request."""
        pooled = (view.pooled_accepted + self.prior_alpha * self.prior_tokens) / (
            view.pooled_tested + self.prior_tokens
        )
        a = (view.accepted + self.prior_tokens * pooled[:, None]) / (
            view.tested + self.prior_tokens
        )
        return np.clip(a, 1e-3, 0.999)

    def gammas(self, view) -> np.ndarray:
        r = view.decoding.shape[0]
        if r == 0:
            return np.zeros(0, np.int64)
        a = self.alpha_estimates(view)
        G = min(self.max_gamma, view.max_gamma)
        g = np.arange(G + 1)
        n = G + 1
        dec = np.repeat(view.decoding, n, axis=0)
        gam = np.tile(g, r)
        target, draft = view.timer.decode_ms_each_gamma(view.decoding, view.context, g)
        tokens = (expected_tokens_per_step(np.repeat(a, n, axis=0), gam[:, None]) * dec).sum(axis=1)
        goodput = np.where(dec.any(axis=1), tokens / np.maximum(target + draft, 1e-12), 0.0)
        return goodput.reshape(r, n).argmax(axis=1).astype(np.int64)


@dataclass(frozen=True)
class FixedTree:
    """`tree:S:K:N`: an SGLang token tree every step (src/treesim/serving.py): the engine runs its S
    draft passes (gamma = S), verifies N tokens per sequence and draws each step's accepted depth
    from the tree's survival by depth. Both engines run it (the compiled loop as a tree kind of its
    own), without stretches."""

    shape: object  # src.treeshape.shape.TreeShape
    reads_slot_state: ClassVar[bool] = True  # not a batch table: the engines route it by class
    speculative: bool = True
    max_segment_steps: int | None = None

    @property
    def name(self) -> str:
        return f"tree:{self.shape.label}"

    @property
    def gamma(self) -> int:
        return self.shape.steps

    def gammas(self, view) -> np.ndarray:
        return np.full(view.batch.size, self.shape.steps, np.int64)


POLICY_FORMS = ("none, fixed[:G], schedule, adaptive, off-above[:N[:G]], tree:S:K:N, "
                "sglang-adaptive[:ema|:throughput_aware]")


def parse_policies(
    text: str,
    default_gamma: int,
    max_gamma: int,
    schedule: BatchSchedule,
    default_off_above: int = 32,
    field_name: str = "--policies",
) -> list:
    """Policies of a comma-separated list (POLICY_FORMS); ConfigError naming --policies.

    `fixed` without G uses default_gamma; `off-above` without N uses default_off_above."""
    out, seen = [], set()
    for part in list_items(field_name, text, POLICY_FORMS):
        head, _, rest = part.partition(":")
        try:
            if part == "none":
                policy = NoSpeculation()
            elif part == "schedule":
                policy = schedule
            elif part == "adaptive":
                policy = Adaptive(max_gamma=max_gamma)
            elif head == "fixed":
                g = ascii_int(rest) if rest else default_gamma
                if not 1 <= g <= max_gamma:
                    raise ValueError(f"gamma {g} outside 1..{max_gamma}")
                policy = FixedGamma(g)
            elif head == "tree":
                from src.treeshape.shape import TreeShapeError, parse_shape
                try:
                    shape = parse_shape(rest)
                except TreeShapeError as e:
                    raise ValueError(str(e)) from None
                if not 1 <= shape.steps <= max_gamma:
                    raise ValueError(f"S = {shape.steps} outside 1..{max_gamma} (--max-gamma)")
                policy = FixedTree(shape) if not shape.is_chain else FixedGamma(shape.steps)
            elif head == "sglang-adaptive":
                from src.online.sglang_adaptive import THROUGHPUT_EXAMPLE_SLOTS, SGLangAdaptive
                strategy = rest or "ema"
                policy = (SGLangAdaptive(strategy, THROUGHPUT_EXAMPLE_SLOTS)
                          if strategy == "throughput_aware" else SGLangAdaptive(strategy))
            elif head == "off-above" or part == "off-above":
                n_text, _, g_text = rest.partition(":")
                n = ascii_int(n_text) if n_text else default_off_above
                g = ascii_int(g_text) if g_text else default_gamma
                if n < 1 or not 1 <= g <= max_gamma:
                    raise ValueError(f"N must be >= 1 and G in 1..{max_gamma}")
                policy = OffAbove(n, g)
            else:
                raise KeyError(part)
        except KeyError:
            raise ConfigError(
                field_name, f"unknown policy '{part}'; allowed: {POLICY_FORMS}"
            ) from None
        except ValueError as e:
            raise ConfigError(field_name, f"'{part}': {e}; allowed: {POLICY_FORMS}") from None
        if policy.name in seen:
            raise ConfigError(field_name, f"'{part}' is listed twice")
        seen.add(policy.name)
        out.append(policy)
    return out


def parse_schedule_json(text: str, field_name: str = "--schedule") -> BatchSchedule:
    """A schedule given as vLLM JSON: either the list of [low, high, K] entries or the
    --speculative-config object holding it; checked with vLLM's own rules."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(
            field_name, "not valid JSON; expected e.g. [[1, 15, 3], [16, 1024, 0]]"
        ) from None
    num = None
    if isinstance(data, dict):
        num = data.get("num_speculative_tokens")
        data = data.get("num_speculative_tokens_per_batch_size")
    if not isinstance(data, list) or not data:
        raise ConfigError(field_name, "expected a non-empty list of [low, high, K] entries")
    ranges = []
    for entry in data:
        if not (
            isinstance(entry, list)
            and len(entry) == 3
            and all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
        ):
            raise ConfigError(field_name, f"entry {entry!r} is not [low, high, K] of integers")
        lo, hi, k = entry
        if lo <= 0 or hi < lo or k < 0:
            raise ConfigError(field_name, f"entry {entry!r}: need 1 <= low <= high and K >= 0")
        ranges.append((lo, hi, k))
    ranges.sort()
    if ranges[0][0] != 1:
        raise ConfigError(field_name, "the first batch-size range must start at 1")
    for (_, hi0, _), (lo1, _, _) in zip(ranges, ranges[1:]):
        if lo1 <= hi0:
            raise ConfigError(field_name, "batch-size ranges must not overlap")
    top = max(k for _, _, k in ranges)
    if num is None:
        num = top
    if not isinstance(num, int) or num <= 0:
        raise ConfigError(
            field_name,
            "num_speculative_tokens must be an integer > 0 (vLLM "
            "requires it even when every K is 0)",
        )
    return BatchSchedule(tuple(ranges), num)


def compress_schedule(
    gamma_by_batch: np.ndarray,
    num_speculative_tokens: int | None = None,
) -> BatchSchedule:
    """[low, high, K] ranges of a per-batch-size gamma array (index 0 unused)."""
    ranges = []
    for b in range(1, gamma_by_batch.size):
        k = int(gamma_by_batch[b])
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = b
        else:
            ranges.append([b, b, k])
    top = max((k for _, _, k in ranges), default=0)
    num = num_speculative_tokens or max(top, 1)
    return BatchSchedule(tuple(tuple(r) for r in ranges), num)


def steady_state_gammas(
    spec_timer,
    greedy_timer,
    alphas: np.ndarray,
    context_tokens: float,
    max_batch: int,
    max_gamma: int,
    kv_tokens: int | None = None,
    hazard_profile: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best gamma (0 = off) and its speedup for every batch size 1..max_batch in steady state.

    Batch sizes whose KV cache (context + max_gamma + 1 tokens each) exceeds `kv_tokens` cannot
    run at this context; they take the last batch size that fits (as vLLM's lookup carries the
    last range forward).

    Every sequence at `context_tokens`; speedup(B, g) = Omega_eff(g) T_AR(B) / (T_D(B, g) +
    T_V(B, g)) with Omega_eff = 1 / mean(1 / E[K + 1](alpha)) over the workload's alphas (MagicDec's
    batched form, Chen et al. 2024; src/hardware/steady_state.py uses the same); for a per-position
    mode (`hazard_profile`, src/acceptance.py) E[K + 1] = 1 + sum_{i <= g} alpha^(D_i). Returns
    ([max_batch + 1] best gamma, [max_batch + 1] its speedup, [max_gamma + 1, max_batch + 1] the
    speedup of every gamma), batch index 0 unused.
    """
    full = max_batch
    if kv_tokens is not None:
        max_batch = int(
            np.clip(kv_tokens // (int(round(context_tokens)) + max_gamma + 1), 1, max_batch)
        )
    B = np.arange(1, max_batch + 1)
    active = np.arange(max_batch)[None, :] < B[:, None]
    ctx = np.full(active.shape, int(round(context_tokens)))
    t_ar, _ = greedy_timer.decode_ms(active, np.zeros(B.size, np.int64), ctx)
    best_g = np.zeros(max_batch + 1, np.int64)
    best_s = np.ones(max_batch + 1)
    by_gamma = np.ones((max_gamma + 1, full + 1))  # speedup of each gamma (row 0: off)
    for g in range(1, max_gamma + 1):
        target, draft = spec_timer.decode_ms(active, np.full(B.size, g), ctx)
        omega = 1.0 / np.mean(1.0 / expected_tokens_per_step_profile(alphas, g, hazard_profile))
        s = omega * t_ar / (target + draft)
        by_gamma[g, 1 : max_batch + 1] = s
        by_gamma[g, max_batch + 1 :] = s[-1]
        better = s > best_s[1:]
        best_s[1:] = np.where(better, s, best_s[1:])
        best_g[1:] = np.where(better, g, best_g[1:])
    if full > max_batch:
        best_g = np.concatenate([best_g, np.full(full - max_batch, best_g[-1])])
        best_s = np.concatenate([best_s, np.full(full - max_batch, best_s[-1])])
    return best_g, best_s, by_gamma


def check_gamma_text(text: str, flag: str, max_gamma: int) -> int:
    try:
        g = ascii_int(text)
    except ValueError:
        g = math.nan
    if not (isinstance(g, int) and 1 <= g <= max_gamma):
        raise ConfigError(flag, f"'{text}' is not an integer in 1..{max_gamma}")
    return g
