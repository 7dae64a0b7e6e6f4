"""`python run.py recommend` on a disaggregated deployment: the decode pool's speculation settings
per engine (issue 25).

    python run.py recommend --scenario configs/scenarios/disagg-deepseek-v3-mtp-2x8xh200.toml \
        --acceptance 0.875
    python run.py recommend --gpu h200 --target deepseek-v3 --draft mtp --acceptance 0.875 \
        --disagg decode_tp=1,decode_dp=8,decode_ep=8,prefill_tp=8,prefill_ep=8

--scenario takes a scenario file with a [disagg] table (its [scenario] table gives the GPU,
target and draft); --disagg KEY=VALUE,... gives or overrides [disagg] keys (the table's names).
Without either, recommend is the aggregated src/online/recommend_all.py, unchanged.

Method: one decode worker (decode_tp x decode_dp GPUs, decode_ep) priced by serve's decode-pool
timer (src/disagg/serve.py decode_deployments: no prefill in its batches, attention per DP rank,
the MoE all-to-all, its DP-aware KV capacity); recommend.steady then picks each engine's schedule
from that worker's steady state exactly as the aggregated recommend does (the same gamma rule,
src/gamma_rule.py, at the same context). At decode_dp 1 the worker is the aggregated
replica at tp = decode_tp: the schedule is the aggregated one bit for bit (the steady state has no
prefill in it either). Batch sizes count the worker's requests (all DP ranks together). The
prefill pool is stated as context only: it runs prompts and does not speculate.
"""
from __future__ import annotations

import sys
from dataclasses import replace

from src.config import ConfigError, list_items, read_toml
from src.online import recommend_all
from src.online.recommend import make_parser as recommend_parser
from src.online.recommend_all import _answers, answers_lines

FROM_SCENARIO = ("gpu", "target", "draft")


def make_parser():
    p = recommend_parser()
    for action in p._actions:  # with --scenario these come from its [scenario] table
        if action.dest in FROM_SCENARIO:
            action.required = False
    p.add_argument("--scenario", help="a scenario file with a [disagg] table: recommend for its "
                   "decode pool (GPU, target and draft from its [scenario] table; not with "
                   "--gpu, --target, --draft, --tp)")
    p.add_argument("--disagg", help="the disaggregated deployment as [disagg] keys, "
                   "KEY=VALUE,...: decode_tp, decode_dp (attention data-parallel ranks), "
                   "decode_ep (1 or decode_tp x decode_dp), decode_workers, prefill_tp, "
                   "prefill_dp, prefill_ep, prefill_workers, kv_link; over --scenario's table, "
                   "or with --gpu/--target/--draft (absent keys are 1)")
    return p


def _disagg_items(text: str) -> dict:
    from src.disagg.config import DISAGG_KEYS
    from src.errors import ascii_int
    out = {}
    for item in list_items("--disagg", text, "KEY=VALUE items"):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in DISAGG_KEYS:
            raise ConfigError("--disagg", f"'{item}' is not KEY=VALUE with KEY one of "
                                          f"{', '.join(DISAGG_KEYS)}")
        if key in out:
            raise ConfigError("--disagg", f"{key} is given twice")
        if key == "kv_link":
            out[key] = value.strip()
            continue
        try:
            out[key] = ascii_int(value.strip())
        except ValueError:
            raise ConfigError("--disagg", f"{key}={value}: expected an integer >= 1") from None
    return out


def deployment(args):
    """(args for recommend.steady at the decode worker, DisaggConfig) of a disaggregated run."""
    table, base = {}, {}
    if args.scenario is not None:
        for dest in FROM_SCENARIO + ("tp",):
            given = getattr(args, dest)
            if given is not None and not (dest == "tp" and given == "1"):
                raise ConfigError(f"--{dest}", "comes from --scenario's [scenario] table; give "
                                               "one or the other")
        doc = read_toml(args.scenario, "--scenario")
        if "disagg" not in doc:
            raise ConfigError("--scenario", f"{args.scenario} has no [disagg] table; for an "
                                            "aggregated deployment give --gpu, --target, --draft, "
                                            "--tp")
        if not isinstance(doc.get("scenario"), dict):
            raise ConfigError("--scenario", "missing [scenario] table")
        base = dict(doc["scenario"])
        table = dict(doc["disagg"]) if isinstance(doc["disagg"], dict) else doc["disagg"]
        for dest in FROM_SCENARIO:
            if dest not in base:
                raise ConfigError("--scenario", f"[scenario] has no {dest}")
            setattr(args, dest, str(base[dest]))
    else:
        for dest in FROM_SCENARIO:
            if getattr(args, dest) is None:
                raise ConfigError(f"--{dest}", "required (or --scenario)")
        if args.tp != "1":
            raise ConfigError("--tp", "a disaggregated deployment's decode worker has "
                                      "--disagg decode_tp and decode_dp; allowed: --tp absent")
    if args.disagg is not None:
        if not isinstance(table, dict):
            raise ConfigError("disagg", "expected a table")
        table = {**table, **_disagg_items(args.disagg)}
    for key in ("name", "engine_profiles", "tp", "ep", "draft_tp", "description"):
        base.pop(key, None)
    args.scenario_table = base
    args.tp = "1"
    disagg = _validated(table, args)
    dec = disagg.decode
    args.tp = str(dec.gpus_per_worker)
    args.scenario_table = {**base, "ep": dec.ep}
    from src.disagg.serve import decode_deployments
    args.make_deps = lambda cfg: decode_deployments(cfg, dec)
    return args, disagg


def _validated(table, args):
    """The [disagg] table validated (src/disagg/config.py: errors name disagg.KEY) against the
    target with the file's weight formats on --gpu; --gpu, --target and --draft are checked first
    by recommend's own rules, so their errors name the flags."""
    import copy

    from src.costmodel import load_presets
    from src.disagg.config import disagg_from_table
    from src.online.recommend import _check_draft
    a = copy.copy(args)
    _check_draft(a)
    presets = load_presets()
    gpu = presets.gpu(args.gpu, "--gpu")
    formats = {}
    if args.scenario_table.get("weights"):
        w = args.scenario_table["weights"]
        formats.update(weight_format=w, expert_weight_format=w)
    if args.scenario_table.get("kv_cache"):
        formats["kv_cache_format"] = args.scenario_table["kv_cache"]
    target = replace(presets.model(args.target, "--target"), **formats)
    return disagg_from_table(table, target, gpu, presets.params)


def report(args) -> str:
    args, disagg = deployment(args)
    if args.rate is not None:
        raise ConfigError("--rate", "recommend on a disaggregated deployment prices the decode "
                                    "worker's steady state by batch size (--batch); serve "
                                    "--scenario simulates it by rate")
    if args.engine not in (None, recommend_all.ALL):
        raise ConfigError("--engine", "a disaggregated deployment prints every engine's decode "
                                      "worker; allowed: all (the default)")
    from src.costmodel import load_presets
    from src.disagg.decode_snippets import decode_snippet
    answers = _answers(args)
    done = [(name, st) for _, name, _, st in answers if not isinstance(st, str)]
    st0 = done[0][1]
    sc = st0.cfg.scenario
    pre, dec = disagg.prefill, disagg.decode
    gpu = load_presets().gpus[sc.gpu_id].name
    lines = [f"Disaggregated deployment on {gpu}: {sc.target_model_id} with draft {sc.draft}, "
             f"acceptance {st0.alpha:g} per token; {disagg.gpus} GPUs, KV over "
             f"{disagg.link()}.",
             f"  prefill pool: {pre.label()} (prompts only; it does not speculate; its launch is "
             "the engine's prefill mode without speculation flags, not printed here)",
             f"  decode pool: {dec.label()}: each worker below, priced without prefill in its "
             "batches, attention per DP rank" + (", the MoE all-to-all" if dec.ep > 1 else ""),
             "",
             f"Decode worker's recommendation by engine (steady state, every sequence at "
             f"{st0.context} tokens of context; batch = the worker's requests over its "
             f"{dec.dp} DP rank{'s' if dec.dp > 1 else ''}):"]
    lines += answers_lines(answers, done, args.max_gamma is not None, decode_snippet(dec))
    lines += ["", "Assumptions:",
              "  - the decode worker: serve's decode-pool step (design.md section 19): no "
              "prefill in its batches, attention and its KV per DP rank (requests spread "
              "evenly), the MoE dispatch/combine per layer (DeepEP tables where they match, "
              "roofline otherwise); the prompt's KV arrives from the prefill pool",
              "  - schedules: each engine's steady-state best gamma per batch size by the same "
              "rule as the aggregated recommend (switch only past the tolerance, at most 6 "
              "ranges; KV cache holds " + ", ".join(f"{n} {s.fits}" for n, s in done)
              + " sequences per worker)",
              "  - the engines' P/D transfer backends (mooncake, NixlConnector, DEFAULT) are "
              "examples: use the one your cluster runs"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    if args.scenario is None and args.disagg is None:
        return recommend_all.main(argv)
    try:
        text = report(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0

