"""`python run.py recommend --engine E`: whether to speculate on a deployment, and the engine
settings for it, priced with one engine profile (src/online/recommend_all.py is the command's
entry; without --engine and --rate it prints vLLM, SGLang and TensorRT-LLM side by side).

    python run.py recommend --gpu h100-sxm --target llama-3.1-8b --draft llama-3.2-1b \
        --acceptance 0.7 [--engine vllm-v1] [--rate 1,4,16 | --batch 1,8,64] [--context 2048]

Prints, for a reader: the verdict, the gamma schedule as a ready-to-paste vLLM
`--speculative-config` JSON (`num_speculative_tokens_per_batch_size`, checked against vLLM's own
rules in src/online/policies.py) and the SGLang flags, the expected TPOT and throughput change with
its range over the batch sizes or rates asked, and the assumptions behind the numbers.

* --batch (default 1, 2, 4, ... up to what fits): the steady state of the hardware study, every
  sequence at --context tokens: speedup = Omega(gamma) T_decode / (T_draft + T_verify);
  TPOT changes by 1 / speedup - 1, throughput by speedup - 1.
* --rate: the serving simulator (src/online/engine.py) on the --workload lengths, Poisson
  arrivals, policies none, the printed schedule and SGLang's single gamma, on the same requests;
  changes of TPOT p50 and output throughput with 95% intervals.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from src.config import (
    ALPHA_CLIP,
    ConfigError,
    OneLineArgumentParser,
    PointAlpha,
    check_alpha,
    list_items,
)
from src.costmodel.cudagraph_sizes import add_capture_size_argument, capture_size_option
from src.errors import ascii_float
from src.gamma_rule import MAX_RANGES, SCHEDULE_TOLERANCE, capped_gammas, tops_out
from src.kernels.costmodel import add_kernels_argument, check_measured
from src.online import engine_blocks, mtp_depth, trtllm_snippet
from src.online.engine_blocks import OLD_VLLM_PROFILES
from src.online.gamma_notes import schedule_notes

FIELD_FLAGS = {"scenario.gpu": "--gpu", "scenario.target": "--target", "scenario.draft": "--draft",
               "scenario.tp": "--tp", "scenario.draft_tp": "--draft-tp"}
DEFAULT_REQUESTS = 300


def make_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(
        prog="python run.py recommend",
        description="Whether to speculate on a deployment, the gamma schedule as vLLM "
                    "--speculative-config JSON and SGLang flags, and the expected TPOT and "
                    "throughput change (steady state by batch size, or simulated by request rate).")
    p.add_argument("--gpu", required=True, help="GPU preset id (python run.py step-time --list)")
    add_kernels_argument(p)
    add_capture_size_argument(p)
    p.add_argument("--target", required=True,
                   help="target model: a preset id, e.g. llama-3.1-8b, a Hugging Face id, e.g. "
                   "Qwen/Qwen3-32B (step-time --list), or a path to a Hugging Face config.json "
                   "(README, 'A model from its config.json')")
    p.add_argument("--draft", required=True,
                   help="draft model (as --target) with the target's vocabulary, an EAGLE-3 "
                   "head preset, 'eagle' or 'ngram'")
    p.add_argument("--acceptance", required=True,
                   help=f"per-token acceptance probability of the draft, {ALPHA_CLIP[0]:g}.."
                        f"{ALPHA_CLIP[1]:g} (vLLM's accepted / draft tokens is a lower bound of it "
                        "at gamma > 1)")
    p.add_argument("--engine", help="engine profile, or 'all': vLLM (vllm-v1), SGLang (sglang) "
                                    "and TensorRT-LLM (trtllm) side by side, each priced with "
                                    "its own profile (the default; with --rate: vllm-v1)")
    p.add_argument("--temperature", help="sampling temperature, 0..2 (default 0); > 0 prices the "
                   "sampler's probability traffic: give --acceptance measured at it")
    p.add_argument("--tp", default="1", help="target tensor-parallel degree (default 1)")
    p.add_argument("--draft-tp", help="draft TP degree: vLLM allows only --tp's (the default); "
                                      "not with --draft ngram")
    p.add_argument("--rate", help="request rates (requests/s), comma-separated: simulate serving")
    p.add_argument("--batch", help="batch sizes, comma-separated: steady state (default 1, 2, 4, "
                                   "... up to what fits)")
    p.add_argument("--context", help="tokens in each sequence's context for the schedule and the "
                                     "steady state (default 2048 with --batch, the workload's mean "
                                     "with --rate)")
    p.add_argument("--workload", help="length preset for --rate (default sharegpt)")
    p.add_argument("--max-num-seqs", help="engine cap on running sequences (default: the "
                   "engine's own on --gpu, e.g. vLLM V1's 1024 on an H100, 256 on an A100)")
    p.add_argument("--max-gamma", help="largest gamma considered (default 8)")
    p.add_argument("--draft-model-path", help="Hugging Face repository of the draft to print "
                                              "(default: the preset's; required for --draft eagle "
                                              "and eagle3 and a head without public weights; "
                                              "not with --draft ngram)")
    p.add_argument("--requests", help=f"requests per replication, only with --rate "
                                      f"(default {DEFAULT_REQUESTS})")
    p.add_argument("--tolerance", default=str(SCHEDULE_TOLERANCE),
                   help="switch gamma only where another is modelled to be better by more than "
                        f"this fraction (default {SCHEDULE_TOLERANCE:g}; 0 = the best gamma at "
                        "every batch size)")
    return p


def _tolerance(text: str) -> float:
    """--tolerance: a fraction in 0..0.5."""
    try:
        x = ascii_float(text)
    except ValueError:
        x = float("nan")
    if not 0.0 <= x <= 0.5:
        raise ConfigError("--tolerance", f"'{text}' is not a fraction in 0..0.5 (e.g. 0.02 for "
                                         "2%)")
    return x


def _ints(flag: str, text: str, low: int, high: int) -> list[int]:
    """A comma-separated list of integers by config.list_items' rule: an empty item ('1,,8', a
    trailing comma) is refused, not dropped, as --rate's is."""
    from src.online.cli import _int
    values = [_int(flag, v, low, high)
              for v in list_items(flag, str(text), f"integers {low}..{high}")]
    if len(set(values)) != len(values):
        raise ConfigError(flag, "a value is listed twice")
    return sorted(values)


def _scenario(args):
    from src.costmodel import load_engine_profiles
    from src.hardware.scenario import check_serve_only, scenario_from_dict
    profiles = load_engine_profiles()
    engine = args.engine or ("vllm-v1" if "vllm-v1" in profiles else "vllm-2024")
    if engine not in profiles:
        raise ConfigError("--engine", f"unknown engine profile '{engine}'; known: "
                                      f"{', '.join(sorted(profiles))}")
    from src.online.cli import _int
    tp = _int("--tp", args.tp, 1, 64)
    # a disaggregated decode worker (src/disagg/recommend.py) brings its scenario file's other
    # [scenario] keys (weight formats, ...) and its ep
    base = dict(getattr(args, "scenario_table", None) or {})
    table = {"scenario": {**base, "name": "recommend", "gpu": args.gpu, "target": args.target,
                          "draft": args.draft, "tp": tp, "engine_profiles": [engine]},
             "study": {"batch_sizes": [1], "prompt_len": {"kind": "fixed", "tokens": 16},
                       "output_len": {"kind": "fixed", "tokens": 16}}}
    if args.draft != "ngram":
        # vLLM V1 runs a draft model at the target's TP: draft_tensor_parallel_size defaults to
        # tensor_parallel_size and DraftModelProposer refuses another value
        # (vllm/v1/spec_decode/draft_model.py); an EAGLE head always runs at it.
        draft_tp = _int("--draft-tp", args.draft_tp, 1, 64) if args.draft_tp is not None else tp
        if draft_tp != tp:
            raise ConfigError("--draft-tp", "vLLM runs the draft at the target's tensor-parallel "
                                            f"size and refuses another; allowed: {tp} (--tp)")
        table["scenario"]["draft_tp"] = draft_tp
    try:
        scenario = scenario_from_dict(table)
        check_serve_only(scenario, "recommend")
        return scenario, engine
    except ConfigError as e:
        flag = FIELD_FLAGS.get(e.field_name, e.field_name)
        if flag == "--draft-tp" and args.draft_tp is None:  # draft_tp follows --tp
            raise ConfigError("--tp", f"the draft {args.draft} runs at the target's tp: "
                                      f"{e.allowed}") from None
        raise ConfigError(flag, str(e).split(": ", 1)[1]) from None


def _check_draft(args) -> None:
    """--draft is a model preset, eagle or ngram ('self' needs a draft KV budget, which recommend
    has no option for); the draft-model options are refused where the run would ignore them."""
    from src.costmodel import load_presets
    presets = load_presets()
    models = presets.models
    from src.hardware.scenario import check_not_a_head
    for flag, name in (("--target", args.target), ("--draft", args.draft)):
        if name in models:  # a config.json path is read here: its errors name the flag
            spec = presets.model(name, flag)
            if flag == "--target":
                check_not_a_head(spec, name, flag)
    if args.draft == "self":
        raise ConfigError("--draft", "'self' needs a draft KV budget, which recommend has no "
                                     "option for (use serve with a scenario file); allowed: eagle, "
                                     "ngram or a model preset id")
    if args.draft not in models and args.draft not in ("eagle", "eagle3", "mtp", "ngram"):
        raise ConfigError("--draft", f"unknown '{args.draft}'; allowed: eagle, ngram or a model "
                                     f"preset ({', '.join(sorted(models))})")
    from src.hardware.scenario import check_vocabularies  # the check scenarios use too
    check_vocabularies(models, args.target, args.draft, "--draft")
    if args.draft == "ngram":
        for flag, value in (("--draft-model-path", args.draft_model_path),
                            ("--draft-tp", args.draft_tp)):
            if value is not None:
                raise ConfigError(flag, "only used with a draft model or eagle head: --draft ngram "
                                        "looks drafts up in the prompt")


def build(args):
    """Validated inputs: (ServeConfig, batch sizes or None, rates or None, context or None)."""
    from src.online.cli import _int, parse_rates
    from src.online.config import ServeConfig
    from src.online.engine import EngineLimits
    from src.online.workloads import workload_preset
    alpha = check_alpha("--acceptance", args.acceptance)
    if args.rate is not None and args.batch is not None:
        raise ConfigError("--rate", "give either --rate or --batch, not both")
    if args.workload is not None and args.rate is None:
        raise ConfigError("--workload", "only used with --rate")
    if args.requests is not None and args.rate is None:
        raise ConfigError("--requests", "only used with --rate")
    _check_draft(args)
    scenario, engine = _scenario(args)
    from src.sampling_acceptance import serve_scenario  # --acceptance is the user's figure
    scenario = serve_scenario(args.temperature, None, scenario, True)
    if engine == "trtllm":  # drafts TensorRT-LLM cannot take: one line, exit 2
        trtllm_snippet.check_draft(args.draft)
    if args.kernels is not None:
        check_measured(scenario.gpu_id, [engine], args.kernels)
        scenario = replace(scenario, kernels=args.kernels)
    scenario = replace(scenario, max_cudagraph_capture_size=capture_size_option(
        args, [engine], scenario.preset_paths))
    from src.online.engine_limits import scenario_limits
    lim = scenario_limits(engine, scenario)  # the engine's defaults on --gpu
    max_seqs = _int("--max-num-seqs", args.max_num_seqs or lim.max_num_seqs, 1, 65536)
    max_gamma = _int("--max-gamma", args.max_gamma or "8", 1, 32)
    context = _int("--context", args.context, 1, 10**7) if args.context is not None else None
    rates = parse_rates("--rate", args.rate) if args.rate is not None else None
    batches = _ints("--batch", args.batch, 1, max_seqs) if args.batch is not None else None
    preset = workload_preset(args.workload or "sharegpt")
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind  # eagle3 / mtp drafts (MoE study)
    models = load_presets().models
    if draft_kind(args.draft, models) in ("eagle", "eagle3") and not args.draft_model_path:
        # an EAGLE-3 head preset with public weights prints them (ModelSpec.weights_repository)
        args.draft_model_path = models[args.draft].weights_repository \
            if args.draft in models else None
        if not args.draft_model_path:
            raise ConfigError("--draft-model-path", f"--draft {args.draft} needs the EAGLE head's "
                                                    f"repository ({_head_example(args, models)})")
    cfg = ServeConfig(
        scenario=scenario, engine_profile=engine, rates_per_s=rates or (1.0,),
        policies="none,schedule,fixed", workload=preset.name, prompt_len=preset.prompt_len,
        output_len=preset.output_len, workload_source=preset.source,
        alpha_mode=f"alpha-{alpha:g}", alpha=PointAlpha(alpha),
        requests_per_replication=_int("--requests", args.requests or DEFAULT_REQUESTS, 10, 100_000),
        replications=3,
        limits=EngineLimits(max_seqs, max(lim.max_num_batched_tokens, max_seqs)),
        max_gamma=max_gamma)
    _tolerance(args.tolerance)
    mtp_depth.check_max_gamma(cfg, explicit=args.max_gamma is not None)
    return cfg, batches, rates, context, alpha


def _head_example(args, models) -> str:
    """An EAGLE head for --target: the head preset with public weights named for it (id
    '<target>-eagle3', the target's id may add a format: qwen3-30b-a3b-fp8), else a plain request
    naming the target."""
    t = models[args.target]
    heads = [k for k, m in models.items() if m.architecture == "eagle3" and m.weights_repository
             and k.endswith("-eagle3") and f"{args.target}-".startswith(f"{k[:-7]}-")
             and (m.hidden_size, m.vocab_size) == (t.hidden_size, t.vocab_size)]
    if heads:
        return f"e.g. {models[heads[0]].weights_repository}, or --draft {heads[0]}"
    return f"one trained for {t.hf_name}"


def schedule_at(cfg, context: int, context_flag: str = "--context",
                tolerance: float = SCHEDULE_TOLERANCE, make_deps=None):
    """(schedule, gamma per batch, speedup per batch, KV tokens, best gamma per batch) at one
    context: the schedule's gamma per batch size by src/gamma_rule.py (a switch only where
    the gain exceeds `tolerance`), its speedup, and the untolerated best gamma; `make_deps(cfg)`
    (default study.deployments: the aggregated replica) gives the (greedy, speculative)
    deployments priced, e.g. a disaggregated decode worker's. A context that
    does not fit one sequence (plus max_gamma + 1 speculative slots) in the KV cache of the
    speculative deployment is refused naming `context_flag`."""
    from src.online.policies import compress_schedule, steady_state_gammas
    from src.online.study import deployments
    deps = (make_deps or deployments)(cfg)
    kv = min(d.kv_capacity_blocks for d in deps) * cfg.limits.block_size_tokens
    if context + cfg.max_gamma + 1 > kv:
        sc = cfg.scenario
        raise ConfigError(context_flag, f"{context} tokens per sequence do not fit the KV cache of "
                                        f"{sc.target_model_id} at tp={sc.tp} with draft {sc.draft} "
                                        f"on {sc.gpu_id} ({kv} tokens, less {cfg.max_gamma + 1} "
                                        f"speculative slots); allowed: up to "
                                        f"{kv - cfg.max_gamma - 1}")
    alphas, profile = mtp_depth.steady_acceptance(cfg)  # i.i.d., or an MTP draft's reuse rule
    best, _, by_gamma = steady_state_gammas(deps[1].timer, deps[0].timer, alphas, context,
                                            cfg.limits.max_num_seqs, cfg.max_gamma, kv_tokens=kv,
                                            hazard_profile=profile)
    by_gamma[~mtp_depth.allowed_gamma_mask(cfg)] = 0.0  # gammas vLLM refuses for the draft
    gammas, used = capped_gammas(by_gamma, tolerance)
    speedups = by_gamma[gammas, np.arange(gammas.size)]
    speedups[0] = 1.0
    return (compress_schedule(gammas, max(int(gammas.max()), 1)), gammas, speedups, kv, best,
            used)


def _pct(x: float) -> str:
    return f"{100 * x:+.0f}%"


class Steady(NamedTuple):
    """One engine's validated inputs and steady-state schedule (`steady`)."""
    cfg: object  # ServeConfig
    batches: list | None
    rates: list | None
    context: int
    alpha: float
    tolerance: float  # the one the schedule used (widened past --tolerance for MAX_RANGES)
    schedule: object  # BatchSchedule
    gammas: np.ndarray  # the schedule's gamma per batch size (index 0 unused)
    speedups: np.ndarray  # its steady-state speedup per batch size
    kv: int  # KV-cache tokens of the speculative deployment
    best: np.ndarray  # the untolerated best gamma per batch size
    fits: int  # sequences at `context` that the KV cache holds (capped at max_num_seqs)
    last_on: int  # the last batch size before the schedule's first K 0 (max_num_seqs: none)
    sglang_gamma: int  # the schedule's gamma at batch 1 (1 where it is 0)
    draft_path: str | None  # --draft-model-path, or the head preset's repository build() took


def steady(args) -> Steady:
    """build(args) and the schedule at its context (--context, the workload's mean with --rate,
    else 2048); --batch defaults to the powers of 2 that fit, and one that does not fit is
    refused."""
    cfg, batches, rates, context, alpha = build(args)
    context_flag = "--context"
    if rates is not None and context is None:
        from src.online.workloads import mean_length
        context = int(round(mean_length(cfg.prompt_len) + mean_length(cfg.output_len) / 2))
        context_flag = "--workload"  # the context is the workload's mean
    context = context or 2048
    tolerance = _tolerance(args.tolerance)
    schedule, gammas, speedups, kv, best, used = schedule_at(
        cfg, context, context_flag, tolerance, getattr(args, "make_deps", None))
    if used != tolerance:
        print(f"note: --tolerance: {tolerance:g} gave more than {MAX_RANGES} ranges; the "
              f"schedule uses {used:.3g}, the smallest tolerance (x 1.25 steps) with at most "
              f"{MAX_RANGES}", file=sys.stderr)
    fits = max(1, min(cfg.limits.max_num_seqs, kv // (context + cfg.max_gamma + 1)))
    if batches is None and rates is None:
        batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if b <= fits]
    over = [b for b in batches or () if b > fits]
    if over:
        raise ConfigError("--batch", f"batch {over[0]} at {context} tokens per sequence "
                                     f"does not fit the KV cache ({kv} tokens); allowed: up "
                                     f"to {fits}")
    off = np.nonzero(gammas[1:] == 0)[0]
    last_on = int(off[0]) if off.size else cfg.limits.max_num_seqs
    return Steady(cfg, batches, rates, context, alpha, used, schedule, gammas, speedups, kv, best,
                  fits, last_on, int(gammas[1]) or 1, args.draft_model_path)


def report(args) -> str:
    from src.costmodel import load_presets
    (cfg, batches, rates, context, alpha, tolerance, schedule, gammas, speedups, kv, best, fits,
     last_on, sglang_gamma, _) = steady(args)
    sc = cfg.scenario
    presets = load_presets()
    lines = []
    head = (f"{presets.gpus[sc.gpu_id].name}, {sc.target_model_id} (tp {sc.tp}) with draft "
            f"{sc.draft}, engine profile {cfg.engine_profile}, acceptance {alpha:g} per token")
    rows, changes = [], []
    if batches is not None:
        for b in batches:
            g, s = int(gammas[b]), float(speedups[b])
            rows.append([str(b), str(g), _pct(1 / s - 1) if g else "0%",
                         _pct(s - 1) if g else "0%"])
            changes.append((1 / s - 1 if g else 0.0, s - 1 if g else 0.0))
        where = "batch sizes"
        asked = f"{batches[0]}-{batches[-1]}" if len(batches) > 1 else str(batches[0])
    else:
        from dataclasses import replace

        from src.online.study import run_serving
        cfg = replace(cfg, policies=f"none,schedule,fixed:{sglang_gamma}",
                      schedule_json=json.dumps([list(r) for r in schedule.ranges]))
        from src.online.serving_rules import STEADY_WINDOW_E2E, with_steadiness  # serve's rule
        sim = replace(cfg, alpha=mtp_depth.serving_alpha(cfg))  # an MTP draft's reuse rule
        t = with_steadiness(run_serving(sim, workers=None)["table"], sim)
        t = t.set_index(["policy", "rate_per_s"])
        bursts = [f"{r:g}/s" for r in rates
                  if not (t.loc[("schedule", r)].steady_state and t.loc[("none", r)].steady_state)]
        rate_batches = [(r, float(t.loc[("schedule", r)].mean_batch)) for r in rates]
        for r in rates:
            row = t.loc[("schedule", r)]
            tpot = 1 / row.tpot_p50_speedup - 1
            lo, hi = 1 / row.tpot_p50_speedup_ci_high - 1, 1 / row.tpot_p50_speedup_ci_low - 1
            thr = row.output_throughput_tok_s_gain - 1
            rows.append([f"{r:g}", f"{row.mean_gamma:.1f}",
                         f"{_pct(tpot)} [{_pct(lo)}, {_pct(hi)}]",
                         f"{_pct(thr)}", f"{row.mean_batch:.0f}"])
            changes.append((tpot, thr))
        where = "rates"
        asked = f"{rates[0]:g}-{rates[-1]:g}/s" if len(rates) > 1 else f"{rates[0]:g}/s"
    best_tpot = min(c[0] for c in changes)
    speculate = best_tpot < -0.005 and schedule.ranges[0][2] > 0
    if not speculate:
        lines.append(f"Recommendation: do not speculate ({head}).")
        lines.append(f"At the {where} asked ({asked}) no gamma lowers TPOT; serve without a draft.")
    elif last_on >= cfg.limits.max_num_seqs:
        lines.append(f"Recommendation: speculate at every batch size ({head}).")
    else:
        lines.append(f"Recommendation: speculate while at most {last_on} sequences run, off above "
                     f"({head}).")
    lines.append("")
    if batches is not None:
        lines.append(f"Expected change against no speculation (steady state, every sequence at "
                     f"{context} tokens of context):")
        header = ["batch", "gamma", "TPOT", "throughput"]
    else:
        lines.append(f"Expected change against no speculation (simulated: {cfg.workload} lengths, "
                     f"Poisson arrivals, {cfg.replications} x {cfg.requests_per_replication} "
                     "requests per rate; TPOT p50 with 95% interval, output throughput):")
        header = ["rate/s", "mean gamma", "TPOT p50", "throughput", "mean batch"]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header] + rows:
        lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    tp = [c[0] for c in changes]
    th = [c[1] for c in changes]
    lines.append(f"  Range over the {where} asked: TPOT {_pct(min(tp))} to {_pct(max(tp))}, "
                 f"throughput {_pct(min(th))} to {_pct(max(th))}.")
    if rates is not None:
        worse = [f"{r:g}/s" for r, (dt, _) in zip(rates, changes) if dt > 0.005]
        if worse:
            lines.append(f"  At {', '.join(worse)} the schedule still costs TPOT: the draft's "
                         "prefill and KV cache and the steps it still speculates in.")
        lines.append("  Below capacity the output throughput follows the offered rate; it shows "
                     "a gain only where the engine saturates.")
        if bursts:  # as serve marks them (src/online/report.py)
            lines.append(f"  Bursts, not steady states, at {', '.join(bursts)} (arrival window < "
                         f"{STEADY_WINDOW_E2E:g}x mean E2E, as serve marks them): these figures "
                         "hold for such a burst, not for sustained load; more --requests would "
                         "test one.")
    lines.append("")
    lines += schedule_notes(cfg, gammas, best, context, tolerance, rates is not None)
    lines += mtp_depth.depth_notes(cfg, schedule.num_speculative_tokens, sglang_gamma,
                                   tops_out(best[1:], cfg.max_gamma),
                                   explicit=args.max_gamma is not None)
    lines.append("")
    if speculate:  # each engine's printer: src/online/engine_blocks.py
        path = args.draft_model_path
        if cfg.engine_profile == "trtllm":
            lines += engine_blocks.trtllm_block(cfg, schedule, path) + [""]
        lines += engine_blocks.vllm_block(cfg, schedule, path, last_on, sglang_gamma) + [""]
        trees = (alpha, batches, context, None if batches is not None else rate_batches)
        lines += engine_blocks.sglang_block(cfg, schedule, path, last_on, sglang_gamma,
                                            trees) + [""]
    lines.append("Assumptions:")
    lines += [
        mtp_depth.acceptance_assumption(cfg) or
        f"  - acceptance: every draft token is accepted with probability {alpha:g}, independently "
        "(i.i.d.; a draft whose later positions accept less makes deep gammas worth less)",
        f"  - step times: the hardware cost model for {sc.gpu_id} with the {cfg.engine_profile} "
        "engine profile (design.md, 'Hardware cost model', 'Engine profiles')",
        f"  - schedule: the steady-state best gamma per batch size with every sequence at "
        f"{context} tokens; batch sizes beyond what the KV cache holds at that context "
        f"({fits}) keep the last gamma, as vLLM's lookup does",
        "  - KV cache: GPU memory minus weights (target and draft) minus the 10% reserve of "
        "vLLM's gpu_memory_utilization 0.9",
    ]
    if sc.study.temperature > 0:
        lines.append(f"  - sampling at temperature {sc.study.temperature:g}: {alpha:g} must be "
                     "measured at it (vLLM issue #31483: ~80% at T=0, ~30% at T=1); steps pay "
                     "the sampler's probability traffic (design.md)")
    if rates is not None:
        lines.append(f"  - traffic: {cfg.workload} lengths ({cfg.workload_source.split('.')[0]}), "
                     f"max_num_seqs {cfg.limits.max_num_seqs}, chunked prefill, "
                     f"max_num_batched_tokens {cfg.limits.max_num_batched_tokens}")
    if sc.draft == "ngram":
        lines.append("  - n-gram drafting: prompt_lookup_max 4, prompt_lookup_min 2 (vLLM requires "
                     "prompt_lookup_max for method ngram); acceptance depends on how much output "
                     "repeats the prompt")
    if cfg.engine_profile in OLD_VLLM_PROFILES:
        lines.append("  - vLLM v0.6 scores a step by batch expansion (one one-position sequence "
                     "per verified position; the MQA scorer of v0.6.3 is off under CUDA graphs), "
                     "which the profile prices")
    else:
        lines.append("  - vLLM's dynamic speculative decoding (num_speculative_tokens_per_batch_"
                     "size) is documented as tested with EAGLE/EAGLE-3 and off for data parallel "
                     "> 1")
    return "\n".join(lines)

