"""`python run.py plan`: the capacity search over GPUs, tp sizes, model pairs, engines, policies
and workloads (src/plan/search.py), run on local processes or a Dask cluster (src/executor.py).

    python run.py plan --plan configs/plan-example.toml [--out DIR] [--dask local:4 | ADDRESS]
    python run.py plan --gpus h100-sxm,l40s --pairs llama-3.1-8b+llama-3.2-1b --policies fixed:3 \
        --workloads alpaca --slo ttft=2s,tpot=50ms --target-rate 100 \
        --prices h100-sxm=2.99,l40s=0.86

Writes OUT/results/plan.csv, the plan section of OUT/results/summary.txt and
OUT/plots/plan_capacity.png as one set (src/outputs.py: Ctrl-C leaves the previous ones whole).
Finished searches are kept in OUT/runs/plan-cache (src/plan/cache.py): a resumed plan reruns only
the others. Bad input: one line naming the option or plan key, exit 2, nothing written.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time

from src.config import ConfigError, OneLineArgumentParser
from src.kernels.costmodel import add_kernels_argument
from src.online.blog_check import block_last

OPTIONS = {  # option -> help (plan key = the option's name with underscores)
    "gpus": "GPU presets, comma-separated (src/presets/gpus.toml)",
    "tp": "tensor-parallel sizes, e.g. 1,2 (default 1); a draft model runs at the same tp",
    "pairs": "target+draft, comma-separated, e.g. llama-3.1-8b+llama-3.2-1b or "
             "Qwen/Qwen3-32B+Qwen/Qwen3-0.6B; each model a preset, a Hugging Face id (step-time "
             "--list) or the path to a Hugging Face config.json (PATH/config.json+PATH/draft.json"
             ", in a plan file relative to its folder); draft also eagle or ngram",
    "engines": "engine profiles (default vllm-v1)",
    "policies": "speculation policies: none, fixed[:G], schedule, adaptive, off-above[:N[:G]], "
                "sglang-adaptive[:ema|:throughput_aware]; "
                "none is always included",
    "workloads": "length presets of src/presets/workloads.toml (default sharegpt)",
    "slo": "ttft=2s,tpot=50ms (default), met when 90%% of requests meet both",
    "target_rate": "requests/s the cheapest deployment must carry (summary P1)",
    "prices": "USD per GPU-hour for every GPU, e.g. h100-sxm=2.99,l40s=0.86 (default: the plan "
              "file's [prices], else costs in GPU-hours)",
    "alpha": "per-token acceptance probability of every request, 0.001..0.999",
    "quality_mode": "a quality mode of the study (default: its first) instead of --alpha",
    "duration_s": "arrival window of a probe, seconds (default 30; longer where a meet is not "
                  "steady)",
    "replications": "replications per probe (default 2)",
    "tolerance": "search until first miss / last meet <= 1 + this (default 0.1)",
    "start_rate": "first rate probed, requests/s (default 4)",
    "seed": "root random seed (default 20261129)",
    "max_gamma": "largest gamma a policy may use (default 8)",
}


def make_parser():
    p = OneLineArgumentParser(
        prog="python run.py plan",
        description="Capacity planning: for every deployment (GPU x tp x target/draft pair x "
                    "engine x workload) that fits in memory and every speculation policy, the "
                    "highest steady request rate meeting the SLO, and its cost per million "
                    "output tokens; writes OUT/results/plan.csv, a plan section in "
                    "OUT/results/summary.txt and OUT/plots/plan_capacity.png.",
        epilog="Options override the --plan file's [plan] keys (the same names, with '_'), "
               "which override the defaults; see configs/plan-example.toml.")
    p.add_argument("--plan", help="plan file (TOML with [plan] and optional [prices] tables)")
    for name, text in OPTIONS.items():
        p.add_argument("--" + name.replace("_", "-"), dest=name, help=text)
    add_kernels_argument(p)
    p.add_argument("--out", help="output folder (default .): OUT/results, OUT/plots")
    p.add_argument("--workers", help="local worker processes (default: one per core)")
    p.add_argument("--dask", help="run the searches on Dask: local:N (a LocalCluster of N worker "
                                  "processes on 127.0.0.1) or a scheduler address, e.g. "
                                  "tcp://10.0.0.5:8786 (default: $DASK_SCHEDULER_ADDRESS, else "
                                  "local processes)")
    p.add_argument("--no-cache", action="store_true",
                   help="search everything again (and keep no finished searches)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--no-plots", action="store_true", help="write results/ only")
    return p


# the most searches one plan runs: design.md section 17 sizes a 10,000-deployment plan with one
# policy besides none (20,000 searches, ~240,000 CPU-seconds) at ~40 minutes on 100 workers, and
# every finished search is held in memory until the outputs are written
MAX_SEARCHES = 20_000
FIT_CHUNK = 64  # deployments per memory-check call on the executor (~14 ms each)


def plan_size(plan) -> tuple[int, int]:
    """(aggregated deployments, searches) of a plan, counted before any is built: the
    aggregated searches and the [disagg] table's pool searches (src/plan/disagg_plan.py)."""
    from src.plan.disagg_plan import disagg_searches

    n = (len(plan.gpus) * len(plan.tp_sizes) * len(plan.pairs) * len(plan.engines)
         * len(plan.workloads))
    return n, n * len(plan.policies) + disagg_searches(plan)


def check_size(plan, flag: str) -> None:
    """ConfigError(flag) where the plan has more than MAX_SEARCHES searches."""
    deployments, searches = plan_size(plan)
    if searches > MAX_SEARCHES:
        raise ConfigError(flag, f"{deployments:,} deployments ({len(plan.gpus)} GPUs x "
                                f"{len(plan.tp_sizes)} tp sizes x {len(plan.pairs)} pairs x "
                                f"{len(plan.engines)} engines x {len(plan.workloads)} workloads)"
                                f" x {len(plan.policies)} policies"
                                + (" + the [disagg] table's pool searches" if plan.disagg
                                   else "") + f" = {searches:,} searches; "
                                f"allowed: at most {MAX_SEARCHES:,} searches a plan (list fewer, "
                                "or split it into several plans)")


def tasks_of(plan):
    """[(Deployment, [SearchTask per policy])] in plan order."""
    from src.plan.search import Deployment

    out = []
    for gpu, tp, (target, draft), engine, workload in itertools.product(
            plan.gpus, plan.tp_sizes, plan.pairs, plan.engines, plan.workloads):
        d = Deployment(gpu, tp, target, draft, engine, workload)
        out.append((d, [task_of(plan, d, policy) for policy in plan.policies]))
    return out


def task_of(plan, d, policy: str):
    """The SearchTask of deployment `d` and `policy` with the plan's settings."""
    from src.plan.search import SearchTask

    files = dict(plan.model_files)
    mine = tuple((m, files[m]) for m in dict.fromkeys((d.target, d.draft)) if m in files)
    return SearchTask(d, policy, plan.slo_ttft_s, plan.slo_tpot_s, plan.slo_attainment_target,
                      plan.alpha, plan.quality_mode, plan.duration_s, plan.replications,
                      plan.tolerance, plan.start_rate_per_s, plan.seed, plan.max_gamma, mine,
                      plan.kernels)


def nothing_fits(plan, skipped) -> str:
    """The error of a plan none of whose deployments fits: the first reason, and what would."""
    from dataclasses import replace

    from src.costmodel import load_presets
    from src.plan.search import fit_check

    d0, why0 = skipped[0]
    if not all(why.startswith("does not fit in GPU memory") for _, why in skipped):
        return f"no deployment of the plan can run ({d0.label}: {why0})"
    task = tasks_of(plan)[0][1][0]
    would = []
    for target, draft in plan.pairs[:4]:  # an error's hint: a few pairs at most
        for tp in (1, 2, 4, 8):
            hits = [g for g in plan.gpus if fit_check(replace(task, deployment=replace(
                d0, gpu=g, tp=tp, target=target, draft=draft))) is None]
            if hits:
                would.append(f"{target}+{draft} at tp {tp} on {hits[0]}")
                break
    models = load_presets().models
    biggest = None
    for target in sorted(models, key=lambda m: -models[m].weight_bytes):
        ok = [(g, tp) for g in plan.gpus for tp in plan.tp_sizes
              if fit_check(replace(task, deployment=replace(
                  d0, gpu=g, tp=tp, target=target, draft="ngram"))) is None]
        if ok:
            biggest = f"the largest target that fits these GPUs and tp sizes is {target} " \
                      f"(tp {ok[0][1]} on {ok[0][0]}, without a draft)"
            break
    hint = "; ".join(filter(None, [("would fit: " + ", ".join(would)) if would else "",
                                   biggest or ""]))
    return (f"no deployment of the plan fits in GPU memory ({d0.label}: "
            f"{why0.removeprefix('does not fit in GPU memory: ')})"
            + (f"; {hint}" if hint else ""))


def _progress(say, total: int, cached: int, deployments: int, per_dep: int, workers: int):
    start = time.perf_counter()
    state = {"done": 0, "deps": {}, "last": -1.0}

    def on_done(task, done: int) -> None:
        d = task.deployment
        state["deps"][d] = state["deps"].get(d, 0) + 1
        complete = sum(1 for n in state["deps"].values() if n == per_dep)
        elapsed = time.perf_counter() - start
        left = total - done
        running = min(workers, left)
        eta = f", about {elapsed / done * left:.0f} s left" if left else ", done"
        now = time.perf_counter()
        if left == 0 or now - state["last"] >= 2.0:
            state["last"] = now
            say(f"  plan: {done + cached}/{total + cached} searches done ({complete} of "
                f"{deployments} deployments complete), {running} running, {elapsed:.0f} s"
                f"{eta}")

    return on_done


def fit_all(deployments, executor, say):
    """(fitting, skipped) of [(Deployment, tasks)]: the memory checks (search.fit_checks) in
    chunks of FIT_CHUNK deployments on the executor, with progress on stderr every 2 s."""
    from src.plan.search import fit_checks

    chunks = [deployments[i:i + FIT_CHUNK] for i in range(0, len(deployments), FIT_CHUNK)]
    start, last = time.perf_counter(), [time.perf_counter()]
    checked = [0]

    def progress(i, result, done, total):
        checked[0] += len(chunks[i])
        now = time.perf_counter()
        if len(chunks) > 1 and (done == total or now - last[0] >= 2.0):
            last[0] = now
            say(f"  plan: memory checks {checked[0]:,}/{len(deployments):,} deployments, "
                f"{now - start:.0f} s")

    if len(chunks) > 1:
        say(f"plan: checking {len(deployments):,} deployments fit in memory on {executor.label}")
    whys = executor.map(fit_checks, [([tasks[0] for _, tasks in c],) for c in chunks],
                        on_done=progress)
    fitting, skipped = [], []
    for chunk, reasons in zip(chunks, whys):
        for (d, tasks), why in zip(chunk, reasons):
            (skipped.append((d, why)) if why else fitting.append((d, tasks)))
    return fitting, skipped


def run(args, say) -> int:
    from src import outputs
    from src.executor import dask_option, open_executor
    from src.plan import report
    from src.plan.cache import SearchCache, code_version
    from src.plan.config import build_plan
    from src.plan.disagg_plan import disagg_entries, entry_tasks
    from src.plan.disagg_search import any_search

    options = {name: getattr(args, name) for name in OPTIONS}
    plan = build_plan(options, args.plan)
    check_size(plan, "--plan" if args.plan else "plan")
    if args.kernels is not None:
        from dataclasses import replace

        from src.kernels.costmodel import check_measured
        from src.kernels.sources import table_source

        if not any(table_source(g, e)[0] for g in plan.gpus for e in plan.engines):
            check_measured(plan.gpus[0], plan.engines, args.kernels)
        plan = replace(plan, kernels=args.kernels)
    out = "." if args.out is None else args.out
    outputs.prepare(out)
    workers = None
    if args.workers is not None:
        from src.online.cli import _int
        workers = _int("--workers", args.workers, 1, 256)
    dask = dask_option(args.dask)
    with open_executor(dask, workers) as executor:
        from src.kernels.costmodel import deferred_notes

        with deferred_notes():  # a plan nothing of which fits is one line, no --kernels note
            fitting, skipped = fit_all(tasks_of(plan), executor, say)
            entries, disagg_skipped = disagg_entries(plan, lambda d, p: task_of(plan, d, p))
            if not fitting and not entries:
                raise ConfigError("--plan" if args.plan else "--pairs",
                                  nothing_fits(plan, skipped))
        cache = SearchCache(None if args.no_cache else os.path.join(out, "runs", "plan-cache"),
                            code_version())
        todo = [t for _, tasks in fitting for t in tasks] + entry_tasks(entries)
        results = {t: cache.get(t) for t in todo}
        missing = [t for t in todo if results[t] is None]
        for d, why in skipped:
            say(f"plan: skipped {d.label}: {why}")
        for d, cand, why in disagg_skipped:
            say(f"plan: skipped {d.label.replace(' tp1', '')} {cand.label()}: {why}")
        pools = f" + {len(todo) - len(fitting) * len(plan.policies)} disaggregated pool" \
            if entries else ""
        say(f"plan: {len(fitting)} deployments x {len(plan.policies)} policies{pools} = "
            f"{len(todo)} searches, {len(todo) - len(missing)} reused from "
            f"{cache.folder or 'no cache'}, "
            f"{len(missing)} to run on {executor.label}")
        progress = _progress(say, len(missing), len(todo) - len(missing), len(fitting),
                             len(plan.policies), executor.workers)

        def done(i, result, n_done, total):
            task = missing[i]
            result = json.loads(json.dumps(result))  # as the cache gives it back: same bytes
            results[task] = result
            cache.put(task, result)
            progress(task, n_done)

        executor.map(any_search, [(t,) for t in missing], on_done=done)
    searches = [(d, t.policy, results[t]) for d, tasks in fitting for t in tasks]
    table = report.plan_table(plan, searches)
    extra = []
    new = {report.CSV_PATH: report.csv_bytes(table)}
    if plan.disagg is not None:
        from src.plan import disagg_report

        dtable = disagg_report.disagg_table(plan, entries, results)
        extra = disagg_report.disagg_lines(plan, dtable, table, disagg_skipped)
        new[disagg_report.DISAGG_CSV_PATH] = disagg_report.csv_bytes(dtable)
    section = report.summary_section(plan, table, skipped, extra)
    if not args.no_plots:
        new[report.PLOT_PATH] = report.plot_capacity(plan, table)
    try:
        # OUT/results and OUT/plots are replaced as one set: what other commands wrote there is
        # read under OUT's lock (src/outputs.py), so a run that published meanwhile is kept too
        with outputs.locked(out, say):
            files = existing_files(out)
            summary = files.get("results/summary.txt", b"").decode("utf-8", "replace")
            files["results/summary.txt"] = block_last(report.replace_section(summary,
                                                                             section)).encode()
            if args.no_plots:
                files.pop(report.PLOT_PATH, None)
            files.update(new)
            outputs.publish(out, files)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        raise ConfigError("--out", f"could not write the outputs ({where}{e.strerror or e}); "
                                   "previous outputs left as they were") from None
    say(f"wrote {os.path.join(out, report.CSV_PATH)}, the plan section of "
        f"{os.path.join(out, 'results/summary.txt')}"
        + ("" if args.no_plots else f" and {os.path.join(out, report.PLOT_PATH)}"))
    return 0


def existing_files(out: str) -> dict[str, bytes]:
    """Every file now in OUT/results and OUT/plots (relative path -> bytes): publish() replaces
    the two folders as a set, so what other commands wrote there goes in again."""
    files = {}
    for folder in ("results", "plots"):
        path = os.path.join(out, folder)
        for name in sorted(os.listdir(path)) if os.path.isdir(path) else ():
            full = os.path.join(path, name)
            if os.path.isfile(full) and not name.startswith("."):
                with open(full, "rb") as f:
                    files[f"{folder}/{name}"] = f.read()
    return files


def main(argv: list[str]) -> int:
    from src.processes import stderr_line

    args = make_parser().parse_args(argv)
    say = (lambda msg: None) if args.quiet else stderr_line
    try:
        return run(args, say)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
