"""`recommend --engine all` (the default without --rate): one deployment's answer for vLLM, SGLang
and TensorRT-LLM side by side, each engine priced with its own profile and printed by its own
printer (src/online/engine_blocks.py), each naming the engine version it is for.

Per engine: recommend.steady (build, the schedule by src/gamma_rule.py at --context) under
the engine's profile. Printed: the verdict per engine, a side-by-side table of the ranges where no
engine's K changes (K and the steady-state speedup over the range's batch sizes that fit the KV
cache, for each engine), the speedup and K at each batch size asked, then per engine its schedule,
the notes on it (src/online/gamma_notes.py, src/online/mtp_depth.py) and its snippet. An engine
that refuses the deployment (TensorRT-LLM and an EAGLE-1/2 head; vLLM and an MTP depth it cannot
reuse) gets one line saying why; where every engine refuses it, the first refusal is the error
(one line, exit 2). With --rate one engine is simulated at a time: `all` is refused there.
"""
from __future__ import annotations

import copy
import sys

from src.config import ConfigError
from src.gamma_rule import tops_out
from src.online import engine_blocks, mtp_depth
from src.online.capture_note import VLLM_CAPTURE_VERSION
from src.online.gamma_notes import schedule_notes
from src.online.recommend import make_parser, report, steady
from src.online.sglang_adaptive import SGLANG_COMMIT
from src.online.trtllm_snippet import TRTLLM_SOURCE

# (engine profile, engine, the version its answer is for: src/presets/engines.toml's sources)
ENGINES = (
    ("vllm-v1", "vLLM",
     "vLLM V1 (2025-26): --speculative-config fields of vllm/config/speculative.py, "
     "num_speculative_tokens_per_batch_size of vllm/v1/spec_decode/dynamic/, CUDA-graph sizes "
     f"of {VLLM_CAPTURE_VERSION}; kernels of vLLM 0.24.0"),
    ("sglang", "SGLang",
     "SGLang v0.5.10.post1 (static flags, the sglang profile's release); "
     f"--speculative-adaptive-config of sgl-project/sglang @ {SGLANG_COMMIT[:8]}"),
    ("trtllm", "TensorRT-LLM",
     f"{TRTLLM_SOURCE}; kernels of TensorRT-LLM 1.3.0rc20"),
)
ALL = "all"


def _answers(args) -> list:
    """[(profile, name, version, Steady or the refusal's text)] for ENGINES; where every engine
    refuses, the first ConfigError is raised."""
    out, errors = [], []
    for profile, name, version in ENGINES:
        a = copy.copy(args)
        a.engine = profile
        try:
            out.append((profile, name, version, steady(a)))
        except ConfigError as e:
            errors.append(e)
            out.append((profile, name, version, str(e)))
    if len(errors) == len(ENGINES):
        raise errors[0]
    return out


def _speculates(st) -> bool:
    """report's rule: some batch asked gains more than 0.5% TPOT and batch 1 speculates."""
    tpot = [1 / float(st.speedups[b]) - 1 for b in st.batches if st.gammas[b]]
    return bool(tpot) and min(tpot) < -0.005 and st.schedule.ranges[0][2] > 0


def _verdict(st) -> str:
    if not _speculates(st):
        return "do not speculate (no gamma lowers TPOT at the batch sizes asked)"
    if st.last_on >= st.cfg.limits.max_num_seqs:
        return "speculate at every batch size"
    return f"speculate while at most {st.last_on} sequences run, off above"


def _ranges_text(schedule) -> str:
    return ", ".join(f"{lo}-{hi} K{k}" if k else f"{lo}-{hi} off"
                     for lo, hi, k in sorted(schedule.ranges))


def _cell(st, lo: int, hi: int) -> str:
    """K and the speedup range over batches lo..hi that fit one engine's KV cache."""
    k = int(st.gammas[lo])
    if not k:
        return "off"
    last = min(hi, st.fits)
    if last < lo:
        return f"K{k} (beyond KV)"
    first, end = f"{float(st.speedups[lo]):.2f}", f"{float(st.speedups[last]):.2f}"
    return f"K{k} {first}x" if first == end else f"K{k} {first}-{end}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return ["  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
            for r in [header] + rows]


def side_by_side(done: list) -> list[str]:
    """The ranges table (batch range -> K and speedup per engine) and the table at the batch sizes
    asked; `done`: [(name, Steady)] of the engines that priced the deployment."""
    max_seqs = done[0][1].cfg.limits.max_num_seqs
    top = max(st.fits for _, st in done)
    lows = sorted({lo for _, st in done for lo, _, _ in st.schedule.ranges if lo <= top} | {1})
    bounds = [(lo, (lows[i + 1] - 1) if i + 1 < len(lows) else max_seqs)
              for i, lo in enumerate(lows)]
    names = [name for name, _ in done]
    lines = ["Side by side: gamma K by batch range, from each engine's own schedule, and its "
             "steady-state speedup against no speculation on the same engine (tokens per ms; "
             "from the range's first batch to its last that fits the KV cache):"]
    lines += _table(["batch"] + names, [[f"{lo}-{hi}" if hi > lo else str(lo)]
                                        + [_cell(st, lo, hi) for _, st in done]
                                        for lo, hi in bounds])
    lines.append("")
    lines.append(f"At the batch sizes asked (every sequence at {done[0][1].context} tokens of "
                 "context): speedup, K")
    batches = sorted({b for _, st in done for b in st.batches})
    rows = [[str(b)] + [(f"{float(st.speedups[b]):.2f}x K{int(st.gammas[b])}"
                         if st.gammas[b] else "1.00x off") if b <= st.fits else "-"
                        for _, st in done] for b in batches]
    return lines + _table(["batch"] + names, rows)


def engine_section(profile: str, name: str, version: str, st, explicit_max_gamma: bool,
                   snippet=None) -> list[str]:
    """One engine's schedule, notes and snippet (its printers in src/online/engine_blocks.py;
    `snippet(profile, st)`, where given, prints another deployment's: src/disagg/recommend.py's
    decode worker)."""
    cfg, draft_path = st.cfg, st.draft_path
    lines = [f"=== {name} (engine profile {profile}; for {version}) ===",
             f"Schedule (batch range -> K): {_ranges_text(st.schedule)}"]
    lines += schedule_notes(cfg, st.gammas, st.best, st.context, st.tolerance, False)
    if profile != "trtllm":  # trtllm_snippet says it in TensorRT-LLM's words
        lines += mtp_depth.depth_notes(cfg, st.schedule.num_speculative_tokens, st.sglang_gamma,
                                       tops_out(st.best[1:], cfg.max_gamma),
                                       explicit=explicit_max_gamma)
    if not _speculates(st):
        return lines + [f"{name}: not printed: {_verdict(st)}."]
    lines.append("")
    if snippet is not None:
        return lines + snippet(profile, st)
    if profile == "trtllm":
        return lines + engine_blocks.trtllm_block(cfg, st.schedule, draft_path)
    if profile == "sglang":
        trees = (st.alpha, st.batches, st.context, None)
        return lines + engine_blocks.sglang_block(cfg, st.schedule, draft_path, st.last_on,
                                                  st.sglang_gamma, trees)
    return lines + engine_blocks.vllm_block(cfg, st.schedule, draft_path, st.last_on,
                                            st.sglang_gamma)


def answers_lines(answers: list, done: list, explicit_max_gamma: bool, snippet=None
                  ) -> list[str]:
    """Every engine's verdict line, the side-by-side table, then one section per engine (a
    refused engine: one line saying why, instead of a snippet); `snippet` as engine_section's."""
    lines = []
    for profile, name, version, st in answers:
        verdict = "refused (its line below says why)" if isinstance(st, str) else _verdict(st)
        lines.append(f"  {name} ({profile}): {verdict}")
    lines.append("")
    lines += side_by_side(done)
    for profile, name, version, st in answers:
        lines.append("")
        if isinstance(st, str):  # one line saying why, instead of a snippet
            lines.append(f"=== {name} (engine profile {profile}; for {version}) === not "
                         f"printed, refused: {st}")
            continue
        lines += engine_section(profile, name, version, st, explicit_max_gamma, snippet)
    return lines


def report_all(args) -> str:
    from src.costmodel import load_presets
    if args.rate is not None:
        raise ConfigError("--engine", "'all' prices every engine in the steady state (--batch); "
                                      "with --rate give one engine profile (e.g. vllm-v1, "
                                      "sglang, trtllm)")
    answers = _answers(args)
    done = [(name, st) for _, name, _, st in answers if not isinstance(st, str)]
    st0 = done[0][1]
    sc = st0.cfg.scenario
    gpu = load_presets().gpus[sc.gpu_id].name
    lines = [f"Recommendation by engine ({gpu}, {sc.target_model_id} (tp {sc.tp}) with draft "
             f"{sc.draft}, acceptance {st0.alpha:g} per token; steady state, every sequence at "
             f"{st0.context} tokens of context):"]
    lines += answers_lines(answers, done, args.max_gamma is not None)
    lines += ["", "Assumptions:",
              mtp_depth.acceptance_assumption(st0.cfg) or
              f"  - acceptance: every draft token is accepted with probability {st0.alpha:g}, "
              "independently (i.i.d.), on every engine",
              f"  - step times: the hardware cost model for {sc.gpu_id} with each engine's "
              "profile (design.md, 'Hardware cost model', 'Engine profiles'); a speedup is "
              "against no speculation on the same engine",
              "  - schedules: each engine's steady-state best gamma per batch size by the same "
              "rule (switch only past the tolerance, at most 6 ranges); batch sizes beyond what "
              "the KV cache holds keep the last gamma (KV cache holds "
              + ", ".join(f"{name} {st.fits}" for name, st in done) + " sequences)",
              "  - one engine in detail, and --rate: --engine vllm-v1, sglang or trtllm"]
    if sc.draft == "ngram":
        lines.append("  - n-gram drafting: vLLM prompt_lookup_max 4, prompt_lookup_min 2; SGLang "
                     "BFS breadth 1; acceptance depends on how much output repeats the prompt")
    lines.append("  - vLLM's dynamic speculative decoding (num_speculative_tokens_per_batch_size) "
                 "is documented as tested with EAGLE/EAGLE-3 and off for data parallel > 1")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    try:
        if args.engine is None and args.rate is None or args.engine == ALL:
            text = report_all(args)
        else:
            text = report(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)  # a reader that stops early (`| head`) is run.py's to handle
    return 0
