"""Per-position acceptance from a saved vLLM /metrics text (Prometheus text exposition format).

vLLM V1 (vllm/v1/spec_decode/metrics.py, SpecDecodingProm) keeps four counters per engine, labelled
model_name and engine:

    vllm:spec_decode_num_drafts                  drafts verified (one per request and step)
    vllm:spec_decode_num_draft_tokens            draft tokens verified
    vllm:spec_decode_num_accepted_tokens         draft tokens accepted (the bonus token not counted)
    vllm:spec_decode_num_accepted_tokens_per_pos drafts whose tokens 0..i were all accepted,
                                                 one series per position="i", i = 0..k-1

On the wire a counter's samples carry `_total` (prometheus_client adds it); older exporters and
tools print the family name without it, and prometheus_client also emits `<name>_created` gauges
(creation timestamps), which are ignored here. The file is parsed with prometheus_client's own
text parser, the reference implementation of the format.

Derivation (position i counted from 1 here, from 0 in vLLM's label):
    a_1 = per_pos[0] / drafts,   a_i = per_pos[i-1] / per_pos[i-2]   (conditional rates)
    mean acceptance length = 1 + accepted / drafts          (vLLM's convention: bonus included)
Two snapshots of the same server (before, after a benchmark) give the window's counts by difference.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from src.acceptance import iid_alpha_from_tokens_per_step
from src.config import ConfigError, PerPositionAlpha, read_text_file

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POSITION)
OPTION = "--acceptance-from-vllm"


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The speculative-decoding counters of one snapshot (or window), summed over label sets."""

    drafts: float | None  # None when the counter is absent
    draft_tokens: float | None
    accepted_tokens: float | None
    accepted_per_position: tuple[float, ...]  # index i = vLLM position "i"
    model_names: tuple[str, ...]  # model_name label values summed over
    engines: int  # distinct label sets (engines x models) summed over
    source: str  # file name(s), for messages


def _counter_name(sample_name: str) -> str | None:
    """The counter a sample belongs to (either spelling), or None for other series."""
    if sample_name.endswith("_created"):
        return None
    base = sample_name.removesuffix("_total")
    return base if base in COUNTERS else None


def parse_counters(text: str, source: str, model_name: str | None = None,
                   option: str = OPTION) -> SpecDecodeCounters:
    """Sum every engine's (and model's, unless model_name picks one) spec-decode counters."""
    sums: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    seen: set = set()
    models: set[str] = set()
    all_models: set[str] = set()
    label_sets: set = set()
    for line in text.splitlines():  # the parser's float() reads other scripts' digits ('٣' = 3)
        value_part = line.rsplit("}", 1)[-1] if "}" in line else line.strip().partition(" ")[2]
        if not line.startswith("#") and not value_part.isascii():
            raise ConfigError(option, f"{source}: the sample {line.strip()[:80]!r} has a value "
                                      "that is not in ASCII digits; expected numbers such as "
                                      "12 or 1.5e3")
    try:
        families = list(text_string_to_metric_families(text))
    # malformed lines (ValueError mostly)
    except (ValueError, IndexError, KeyError, TypeError) as e:
        raise ConfigError(option, f"{source} is not valid Prometheus text exposition format ({e}); "
                                  "expected the saved output of the server's /metrics "
                                  "endpoint") from None
    for family in families:
        for sample in family.samples:
            name = _counter_name(sample.name)
            if name is None:
                continue
            labels = dict(sample.labels)
            all_models.add(labels.get("model_name", ""))
            if model_name is not None and labels.get("model_name") != model_name:
                continue
            key = (name, tuple(sorted(labels.items())))
            if key in seen:
                raise ConfigError(option,
                                  f"{source}: {name}{labels} appears twice (with and without "
                                          "_total?); expected one sample per counter and label set")
            seen.add(key)
            value = float(sample.value)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(option, f"{source}: {name}{labels} is {sample.value}; expected a "
                                          "finite count >= 0")
            models.add(labels.get("model_name", ""))
            label_sets.add(tuple(sorted((k, v) for k, v in labels.items() if k != "position")))
            if name == PER_POSITION:
                position = labels.get("position", "")
                if not (position.isascii() and position.isdigit()):
                    raise ConfigError(option,
                                      f"{source}: {PER_POSITION} has position={position!r}; "
                                              "expected a label position=\"0\", \"1\", ...")
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + value
            else:
                sums[name] = sums.get(name, 0.0) + value
    if not seen:
        if model_name is not None and all_models:
            found = ", ".join(sorted(repr(m) for m in all_models))
            raise ConfigError("--model-name", f"no speculative-decoding counters with model_name="
                                              f"{model_name!r} in {source}; found: {found}")
        raise ConfigError(option, f"no speculative-decoding counters ({DRAFTS}_total, "
                                  f"{PER_POSITION}_total, ...) in {source}; expected the /metrics "
                                  "text of a vLLM server started with a speculative config")
    positions = sorted(per_pos)
    if positions and positions != list(range(len(positions))):
        raise ConfigError(option, f"{source}: {PER_POSITION} has positions {positions}; expected "
                                  f"every position 0..{positions[-1]}")
    return SpecDecodeCounters(
        drafts=sums.get(DRAFTS), draft_tokens=sums.get(DRAFT_TOKENS),
        accepted_tokens=sums.get(ACCEPTED),
        accepted_per_position=tuple(per_pos[i] for i in positions),
        model_names=tuple(sorted(models)), engines=len(label_sets), source=source)


def difference(before: SpecDecodeCounters, after: SpecDecodeCounters,
               option: str = OPTION) -> SpecDecodeCounters:
    """after - before, counter by counter; a counter that decreased means a restart or swapped
    files."""
    if len(before.accepted_per_position) != len(after.accepted_per_position):
        raise ConfigError(option, f"{before.source} has {len(before.accepted_per_position)} draft "
                                  f"positions and {after.source} "
                                  f"{len(after.accepted_per_position)}; "
                                  "expected two snapshots of the same server")
    pairs = [(DRAFTS, before.drafts, after.drafts),
             (DRAFT_TOKENS, before.draft_tokens, after.draft_tokens),
             (ACCEPTED, before.accepted_tokens, after.accepted_tokens)]
    pairs += [(f'{PER_POSITION}{{position="{i}"}}', b, a) for i, (b, a) in
              enumerate(zip(before.accepted_per_position, after.accepted_per_position))]
    out = {}
    for name, b, a in pairs:
        if (a is None) != (b is None):
            raise ConfigError(option, f"{name} is in only one of {before.source}, {after.source}; "
                                      "expected two snapshots of the same server")
        if a is not None and a < b:
            raise ConfigError(option, f"{name} decreased from {b:g} in {before.source} to {a:g} in "
                                      f"{after.source}; expected the second file to be a later "
                                      "snapshot of the same server (was it restarted?)")
        out[name] = None if a is None else a - b
    return SpecDecodeCounters(
        drafts=out[DRAFTS], draft_tokens=out[DRAFT_TOKENS], accepted_tokens=out[ACCEPTED],
        accepted_per_position=tuple(a - b for b, a in zip(before.accepted_per_position,
                                                          after.accepted_per_position)),
        model_names=after.model_names, engines=after.engines,
        source=f"{after.source} minus {before.source}")


@dataclass(frozen=True)
class VllmAcceptance:
    """What the counters say about acceptance."""

    drafts: float
    draft_tokens: float | None
    accepted_tokens: float  # the accepted counter, or the per-position sum when it is absent
    accepted_per_position: tuple[float, ...]
    rates: tuple[float, ...]  # conditional a_1..a_k
    counters: SpecDecodeCounters

    @property
    def positions(self) -> int:
        return len(self.rates)

    @property
    def mean_acceptance_length(self) -> float:
        """1 + accepted / drafts: committed tokens per verification, the bonus token included."""
        return 1.0 + self.accepted_tokens / self.drafts

    @property
    def short_drafts(self) -> bool:
        """Fewer draft tokens than drafts x positions: some drafts were shorter than k."""
        return (self.draft_tokens is not None
                and self.draft_tokens < self.drafts * self.positions - 0.5)


def derive_acceptance(c: SpecDecodeCounters, option: str = OPTION) -> VllmAcceptance:
    """Per-position conditional rates from counters; ConfigError for counts no engine produces."""
    if not c.accepted_per_position:
        raise ConfigError(option,
                          f"{c.source} has no {PER_POSITION}_total counters (vLLM before V1 "
                                  "per-position metrics?); expected them, or use "
                                  "--acceptance-length "
                                  "1+accepted/drafts --gamma-measured K instead")
    if c.drafts is None:
        raise ConfigError(option, f"{c.source} has per-position counts but no {DRAFTS}_total; "
                                  "expected both (vLLM V1 exports them together)")
    if c.drafts <= 0:
        raise ConfigError(option,
                          f"{c.source}: {DRAFTS} is 0; expected a window in which the server "
                                  "verified drafts")
    counts = (c.drafts,) + c.accepted_per_position
    for i in range(1, len(counts)):
        if counts[i] > counts[i - 1]:
            what = DRAFTS if i == 1 else f'position="{i - 2}"'
            raise ConfigError(option, f"{c.source}: {PER_POSITION}{{position=\"{i - 1}\"}} = "
                                      f"{counts[i]:g} exceeds {what} = {counts[i - 1]:g}; expected "
                                      "counts that never rise with position (a draft's accepted "
                                      "tokens are a prefix)")
    rates = []
    for i in range(1, len(counts)):
        if counts[i] == 0:
            raise ConfigError(option,
                              f"{c.source}: no draft token was accepted at position {i - 1} "
                                      "(conditional rate 0); expected rates in (0, 1], i.e. at "
                                      "least "
                                      "one acceptance at every position (use a longer window)")
        rates.append(counts[i] / counts[i - 1])
    _check_totals(c, option)
    if all(r == 1.0 for r in rates):
        raise ConfigError(option, f"{c.source}: every draft token was accepted at every position; "
                                  "expected at least one rejection (a longer window)")
    accepted = c.accepted_tokens if c.accepted_tokens is not None else sum(c.accepted_per_position)
    return VllmAcceptance(drafts=c.drafts, draft_tokens=c.draft_tokens, accepted_tokens=accepted,
                          accepted_per_position=c.accepted_per_position, rates=tuple(rates),
                          counters=c)


SUM_TOLERANCE = 0.01  # per-position sum vs the accepted counter: a scrape is not atomic


def _check_totals(c: SpecDecodeCounters, option: str) -> None:
    """Totals no engine produces: more draft tokens than drafts x positions, more accepted than
    drafted tokens, or per-position counts that do not sum to the accepted counter (each accepted
    token is counted at exactly one position; a /metrics scrape is not atomic, so within
    SUM_TOLERANCE of it)."""
    k = len(c.accepted_per_position)
    if c.draft_tokens is not None and c.draft_tokens > c.drafts * k:
        raise ConfigError(option, f"{c.source}: {DRAFT_TOKENS} = {c.draft_tokens:g} exceeds drafts "
                                  f"x positions = {c.drafts:g} x {k}; expected at most {k} draft "
                                  "tokens a draft (counters of one server)")
    if c.accepted_tokens is None:
        return
    if c.draft_tokens is not None and c.accepted_tokens > c.draft_tokens:
        raise ConfigError(option, f"{c.source}: {ACCEPTED} = {c.accepted_tokens:g} exceeds "
                                  f"{DRAFT_TOKENS} = {c.draft_tokens:g}; expected accepted <= "
                                  "drafted tokens (counters of one server and one window)")
    total = sum(c.accepted_per_position)
    if abs(total - c.accepted_tokens) > SUM_TOLERANCE * max(c.accepted_tokens, 1.0):
        raise ConfigError(option, f"{c.source}: the per-position counts sum to {total:g} but "
                                  f"{ACCEPTED} is {c.accepted_tokens:g}; expected them equal "
                                  f"within {SUM_TOLERANCE:.0%} (each accepted token counts at "
                                  "one position): counters of one server and one window")


def load_vllm_acceptance(files: str, model_name: str | None = None,
                         option: str = OPTION) -> VllmAcceptance:
    """FILE (one snapshot: counts since the server started) or BEFORE,AFTER (their difference)."""
    paths = [p.strip() for p in files.split(",")]
    if not 1 <= len(paths) <= 2 or any(not p for p in paths):
        raise ConfigError(option, f"expected FILE or BEFORE,AFTER (two snapshots), got {files!r}")
    snapshots = [parse_counters(read_text_file(p, option, "a saved /metrics text file"), p,
                                model_name, option) for p in paths]
    counters = snapshots[0] if len(snapshots) == 1 else difference(*snapshots, option=option)
    return derive_acceptance(counters, option)


def describe(acc: VllmAcceptance) -> list[str]:
    """Lines a user checks the derivation by."""
    c = acc.counters
    models = ", ".join(m or "(no model_name label)" for m in c.model_names)
    draft_tokens = "n/a" if acc.draft_tokens is None else f"{acc.draft_tokens:.0f}"
    lines = [f"vLLM metrics: {c.source} ({c.engines} engine/model series summed; model {models})",
             (f"  drafts {acc.drafts:.0f}, draft tokens {draft_tokens}, accepted tokens "
              f"{acc.accepted_tokens:.0f}, positions {acc.positions}"),
             f"  mean acceptance length (1 + accepted/drafts) {acc.mean_acceptance_length:.3f}"]
    if acc.draft_tokens:
        lines.append(f"  draft acceptance rate (accepted/draft tokens) "
                     f"{acc.accepted_tokens / acc.draft_tokens:.3f}")
    conditional = ", ".join(f"a{i + 1}={a:.3f}" for i, a in enumerate(acc.rates))
    unconditional = ", ".join(f"{n / acc.drafts:.3f}" for n in acc.accepted_per_position)
    lines.append(f"  per-position conditional rates a_i: {conditional}")
    lines.append(f"  unconditional P(accepted length >= i): {unconditional}")
    if acc.short_drafts:
        lines.append(f"  note: {acc.draft_tokens:.0f} draft tokens < drafts x {acc.positions}: "
                     "some drafts were shorter, so a_1 (drafts as its base) is a lower bound")
    lines.append(f"  positions past {acc.positions} reuse a{acc.positions}; every request gets "
                 "these rates (the counters pool requests, so no spread is inferred)")
    return lines


def to_modes(acc: VllmAcceptance, name: str = "vllm_per_position",
             iid_name: str = "vllm_iid") -> dict[str, PerPositionAlpha]:
    """{name: these per-position rates, every request alike; iid_name: the i.i.d. rate with the
    same mean acceptance length at k positions, i.e. what the mean alone would have said}."""
    rates = ", ".join(f"{a:.3f}" for a in acc.rates)
    base = f"vLLM metrics {acc.counters.source}: {acc.drafts:.0f} drafts, mean acceptance length " \
           f"{acc.mean_acceptance_length:.3f} at k = {acc.positions}"
    modes = {name: PerPositionAlpha(rates=acc.rates, spread=0.0, source=f"{base}; rates {rates}",
                                    compare_with=iid_name)}
    alpha = iid_alpha_from_tokens_per_step(acc.mean_acceptance_length, acc.positions)
    modes[iid_name] = PerPositionAlpha(rates=(alpha,), spread=0.0,
                                       source=f"{base}; i.i.d. inversion of that mean")
    return modes
