"""One line in summary.txt's serving section where its schedule and H3's for the same deployment
differ: why they differ and which to paste for what.

The two come from different runs (`python run.py` writes H3, `python run.py serve` the serving
section) and are optimised for different things: H3 for the simulated fixed batch of the study
(every request queued at once, the study's prompt lengths, a switch only where the CIs separate),
the serving section for the steady state at its workload's mean context (a switch only where the
gain exceeds 2%), then simulated under load. Both writers call `with_schedule_note` on the whole
summary, so the line is right whichever ran last.
"""
from __future__ import annotations

import re

PREFIX = "Schedules compared:"
# the serving section's markers (src/online/report.py writes the section between them)
SECTION_BEGIN = BEGIN = "=== SERVING UNDER LOAD (python run.py serve) ==="
SECTION_END = END = "=== END SERVING UNDER LOAD ==="


def _ranges(config_json: str) -> str:
    """The per-batch-size ranges of a printed --speculative-config, as printed."""
    m = re.search(r'"num_speculative_tokens_per_batch_size": (\[.*\])', config_json)
    return m.group(1) if m else config_json.strip()


def _h3(summary: str, scenario: str, engine: str, mode: str) -> tuple[str, str] | None:
    """(H3's ranges, mean decoding context) of the hardware scenario `scenario` for (engine,
    mode), or None where the summary has no such H3 entry."""
    head = f"Hardware scenario: {scenario}\n"
    if head not in summary:
        return None
    part = summary.split(head, 1)[1]
    h3 = part.split("\nH3. ", 1)
    if len(h3) < 2:
        return None
    block = h3[1].split("\nH4. ", 1)[0]
    m = re.search(rf"^   {re.escape(engine)}, {re.escape(mode)}:\n     (.+)$", block, re.M)
    ctx = re.search(r"mean context during decoding (\d+) tokens", part)
    if not m:
        return None
    return _ranges(m.group(1)), (ctx.group(1) if ctx else "?")


def note(summary: str) -> str | None:
    """The line for the serving section of `summary` (None where there is nothing to compare)."""
    if BEGIN not in summary or END not in summary:
        return None
    section = summary.split(BEGIN, 1)[1].split(END, 1)[0]
    dep = re.search(r"^Deployment: (\S+) \(.*\), engine profile (\S+)\.$", section, re.M)
    mode = re.search(r"acceptance mode ([\w-]+)", section)
    sched = re.search(r"; schedule: (\{.*\})$", section, re.M)
    ctx = re.search(r"mean context \((\d+) tokens", section)
    workload = re.search(r"^Workload: (\S+) ", section, re.M)
    if not (dep and mode and sched and ctx and workload):
        return None
    h3 = _h3(summary, dep.group(1), dep.group(2), mode.group(1))
    if h3 is None:
        return None
    h3_ranges, h3_ctx = h3
    ours = _ranges(sched.group(1))
    if ours == h3_ranges:
        return f"{PREFIX} H3 ({dep.group(1)}, {dep.group(2)}, {mode.group(1)}) gives the same."
    return (f"{PREFIX} H3 gives {h3_ranges} for this deployment ({dep.group(2)}, "
            f"{mode.group(1)}): it is optimised for the study's simulated fixed batch (every "
            f"request queued at once, the study's prompt lengths, mean context {h3_ctx} tokens "
            "during decoding); this section's is for the steady state at the "
            f"{workload.group(1)} workload's mean context ({ctx.group(1)} tokens). Paste this "
            f"section's for online traffic like {workload.group(1)}, H3's for offline batches of "
            "the study's lengths, and for another context run python run.py recommend "
            "--context TOKENS.")


def with_schedule_note(summary: str) -> str:
    """`summary` with its serving section's PREFIX line replaced by `note` (or removed), placed
    after the section's 'Schedule optimised for' line."""
    if BEGIN not in summary or END not in summary:
        return summary
    head, rest = summary.split(BEGIN, 1)
    section, tail = rest.split(END, 1)
    lines = [x for x in section.split("\n") if not x.startswith(PREFIX)]
    line = note(head + BEGIN + "\n".join(lines) + END + tail)
    if line is not None:
        at = next((i + 1 for i, x in enumerate(lines) if x.startswith("Schedule optimised for:")),
                  None)
        if at is not None:
            lines.insert(at, line)
    return head + BEGIN + "\n".join(lines) + END + tail
