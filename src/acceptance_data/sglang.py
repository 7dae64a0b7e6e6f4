"""An i.i.d. per-token rate from a mean acceptance length (SGLang's "accept len").

SGLang's scheduler adds, per request and verification, the accepted draft tokens plus one (the
target's own token), and divides by the number of request-verifications
(python/sglang/srt/managers/scheduler_metrics_mixin.py, update_spec_metrics / log_decode_stats):

    accept length tau = 1 + mean accepted drafts per verification = E[K + 1].

vLLM's "Mean acceptance length" (1 + accepted / drafts) is the same quantity. For a chain of K
draft tokens (SGLang: --speculative-num-steps K with --speculative-eagle-topk 1) and i.i.d.
acceptance, tau = (1 - alpha^(K+1)) / (1 - alpha), which is inverted here for alpha.

This is the weaker input: one mean cannot tell a draft whose acceptance decays along the
positions from an i.i.d. one, so the rate reproduces tau at K exactly but extrapolates to other
gammas as if acceptance were i.i.d. (it overstates deep drafts when acceptance decays). With tree
drafting (topk > 1) tau is the accepted path length in a tree and is not a chain's E[K + 1].
"""
from __future__ import annotations

from dataclasses import dataclass

from src.acceptance import iid_alpha_from_tokens_per_step
from src.config import ALPHA_CLIP, MAX_GAMMA, ConfigError, PerPositionAlpha, _number


@dataclass(frozen=True)
class LengthAcceptance:
    tau: float  # mean acceptance length, bonus token included
    gamma_measured: int  # draft tokens per verification when tau was measured
    alpha: float  # the i.i.d. per-token rate that gives tau at gamma_measured

    @property
    def mode_name(self) -> str:
        return f"tau{self.tau:g}_k{self.gamma_measured}"


def acceptance_from_length(tau, gamma_measured) -> LengthAcceptance:
    """Validate TAU and K (one-line ConfigError naming the option) and invert the closed form."""
    if gamma_measured is None:
        raise ConfigError("--gamma-measured",
                          "required with --acceptance-length: the number of draft "
                                              "tokens per step when the length was measured")
    k = _number("--gamma-measured", gamma_measured, integer=True)
    if not 1 <= k <= MAX_GAMMA:
        raise ConfigError("--gamma-measured",
                          f"must be an integer in 1..{MAX_GAMMA}, got {gamma_measured}")
    t = _number("--acceptance-length", tau)
    if not 1.0 < t < k + 1:
        raise ConfigError("--acceptance-length",
                          f"mean acceptance length (bonus token included) must lie "
                                                 f"strictly between 1 and K + 1 = {k + 1}, got "
                                                 f"{tau}")
    alpha = iid_alpha_from_tokens_per_step(t, k)
    if not ALPHA_CLIP[0] <= alpha <= ALPHA_CLIP[1]:
        raise ConfigError("--acceptance-length",
                          f"{tau} at K = {k} means a per-token rate of {alpha:.5f}; "
                                                 "expected one in "
                                                 f"{ALPHA_CLIP[0]}..{ALPHA_CLIP[1]}")
    return LengthAcceptance(tau=t, gamma_measured=k, alpha=alpha)


def describe(acc: LengthAcceptance) -> list[str]:
    first = (f"mean acceptance length {acc.tau:g} at {acc.gamma_measured} draft tokens per step "
             f"(bonus token included) -> i.i.d. per-token rate alpha = {acc.alpha:.4f}")
    second = ("  (the weaker input: a single mean hides any decay of acceptance along the draft; "
              "other gammas are extrapolated as i.i.d.)")
    return [first, second]


def to_mode(acc: LengthAcceptance) -> PerPositionAlpha:
    """A single rate: i.i.d. acceptance with this alpha for every request."""
    return PerPositionAlpha(rates=(acc.alpha,), source=f"mean acceptance length {acc.tau:g} at "
                                                       f"K = {acc.gamma_measured}, i.i.d. "
                                                       "inversion")
