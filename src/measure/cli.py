"""`python run.py measure`: time forward steps of a model preset on this GPU; write the CSV that
`calibrate` reads.

    python run.py measure --model llama-3.1-8b [--draft llama-3.2-1b] --batch 1,8,64 \
        --positions 1,5 --context 2048 [--mode graph,eager] [--attention flash,cudnn] \
        [--what forward,attention_only] [--prefill 128,1024 --prefill-batch 1] --out FILE.csv
    python run.py measure ... --dry-run          # the plan and a time estimate; no torch needed
    python run.py measure --device cpu ...       # tiny-model smoke run on the CPU

Output: FILE.csv with the columns of plan.COLUMNS, one row per configuration measured, and
FILE.env.json describing the machine (GPU, versions, clocks, copy and matmul rates), the options
and every configuration skipped with its reason. Both are written atomically, first after 30 s
and then every 30 s while measuring, so an interrupted run leaves the rows measured so far.
Bad input: one line `error: --flag: what is allowed` on stderr, exit status 2, nothing written.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from src.config import OneLineArgumentParser
from src.costmodel import CostModelInputError, ModelSpec, load_presets
from src.errors import ascii_float, ascii_int
from src.measure.plan import (
    ATTENTION_BACKENDS,
    COLUMNS,
    GIB,
    MODES,
    WHATS,
    Config,
    RepPolicy,
    build_configs,
    config_bytes,
    estimate_plan_s,
    kv_cache_bytes,
    memory_margin_bytes,
    split_by_memory,
    tiny_spec,
)

CHECKPOINT_EVERY_S = 30.0
TRIM_CACHE_BYTES = 4 * GIB  # cached but unused GPU memory beyond this goes back to the driver
INSTALL_HINT = "pip install -r requirements-gpu.txt"
# torch.nn.attention.SDPBackend member of each --attention name
SDPA_BACKEND_NAMES = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                      "efficient": "EFFICIENT_ATTENTION", "math": "MATH"}


class UsageError(Exception):
    """A bad command-line value: message is `--flag: what is allowed`."""


@dataclass(frozen=True)
class MeasureRequest:
    """The validated command line."""

    specs: dict  # model column -> ModelSpec (tiny variants under their tiny-<id> names)
    models: tuple  # (model column, positions) in measuring order
    configs: tuple  # every Config of the plan, before the memory check
    policy: RepPolicy
    device: str  # cuda | cuda:N | cpu
    out: Path | None
    time_budget_s: float | None
    dry_run: bool
    estimate_gpu: str
    presets: tuple
    seed: int
    quiet: bool


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineArgumentParser(
        prog="python run.py measure",
        description="Time decode, verification and prefill steps of a model preset's "
                    "architecture (random BF16 weights) on this GPU and write the CSV that "
                    "`python run.py calibrate` reads. Needs PyTorch with CUDA: " + INSTALL_HINT,
        epilog="Example: python run.py measure --model llama-3.1-8b --draft llama-3.2-1b "
               "--batch 1,8,64 --positions 1,5 --context 2048 --out my-gpu.csv")
    ap.add_argument("--model", required=True,
                    help="model preset id(s), comma-separated, e.g. llama-3.1-8b")
    ap.add_argument("--draft", default=None,
                    help="a draft model preset, measured like --model but at --draft-positions")
    ap.add_argument("--draft-positions", default="1",
                    help="positions per draft step (default 1: one proposed token per pass)")
    ap.add_argument("--batch", default="1", help="comma-separated batch sizes (default 1)")
    ap.add_argument("--positions", default="1",
                    help="new tokens per sequence: 1 = decode, gamma+1 = verify (default 1)")
    ap.add_argument("--context", default="2048",
                    help="comma-separated tokens already cached per sequence (default 2048)")
    ap.add_argument("--mode", default=None,
                    help="graph (one CUDA graph per step) and/or eager; default graph (eager on "
                         "--device cpu)")
    ap.add_argument("--attention", default=None,
                    help=f"SDPA backends, from {', '.join(ATTENTION_BACKENDS)}; default "
                         "flash,cudnn (flash on --device cpu). A backend that cannot run a "
                         "configuration is skipped with a note")
    ap.add_argument("--what", default=None,
                    help="forward (the whole step), attention_only (layers reduced to KV write + "
                         "attention), prefill; default forward, plus prefill with --prefill")
    ap.add_argument("--prefill", default=None, metavar="LENGTHS",
                    help="prompt lengths of prefill rows, e.g. 128,1024,8192")
    ap.add_argument("--prefill-batch", default="1", help="prompts per prefill step (default 1)")
    ap.add_argument("--device", default="cuda",
                    help="cuda, cuda:N or cpu (cpu: a tiny smoke-run model, eager timing)")
    ap.add_argument("--tiny", action="store_true",
                    help="2-layer model with the preset's head layout (implied by --device cpu)")
    ap.add_argument("--out", default=None, metavar="FILE.csv",
                    help="output CSV (FILE.env.json is written beside it); required unless "
                         "--dry-run")
    ap.add_argument("--target-ms", default="100",
                    help="timed work per configuration, ms: reps = target / step time "
                         "(default 100)")
    ap.add_argument("--min-reps", default="5", help="fewest timed repetitions (default 5)")
    ap.add_argument("--max-reps", default="100", help="most timed repetitions (default 100)")
    ap.add_argument("--warmup", default="2", help="untimed runs before timing (default 2)")
    ap.add_argument("--time-budget-s", default=None,
                    help="start no configuration after this many seconds; the rest are listed as "
                         "skipped (default: no limit)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the plan, its memory check and a time estimate; measure nothing")
    ap.add_argument("--estimate-gpu", default="h200",
                    help="GPU preset whose memory and speed --dry-run plans with (default h200)")
    ap.add_argument("--presets", action="append", default=[], metavar="FILE.toml",
                    help="extra preset file merged over the built-ins (your own model shapes)")
    ap.add_argument("--seed", default="0", help="seed of the random weights and inputs")
    ap.add_argument("--quiet", action="store_true", help="no per-configuration progress lines")
    return ap


def _int_list(flag: str, text: str, minimum: int) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = ascii_int(part)
        except ValueError:
            raise UsageError(f"{flag}: '{part}' is not an integer; allowed: comma-separated "
                             f"integers >= {minimum}, e.g. 1,8,64") from None
        if value < minimum:
            raise UsageError(f"{flag}: {value} is too small; allowed: integers >= {minimum}")
        values.append(value)
    return tuple(dict.fromkeys(values))


def _number(flag: str, text: str, minimum: float, integer: bool = False):
    try:
        value = ascii_int(text) if integer else ascii_float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise UsageError(f"{flag}: '{text}' is not {kind}; allowed: >= {minimum:g}") from None
    if not value >= minimum or value != value or value == float("inf"):
        raise UsageError(f"{flag}: {text} is out of range; allowed: finite, >= {minimum:g}")
    return value


def _choices(flag: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(v.strip() for v in text.split(",")))
    bad = [v for v in values if v not in allowed]
    if bad:
        raise UsageError(f"{flag}: unknown '{bad[0]}'; allowed: comma-separated from "
                         f"{', '.join(allowed)}")
    return values


def _check_out(out: str) -> Path:
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"--out: {out} is a folder; allowed: a file path, e.g. my-gpu.csv")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"--out: folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--out: folder {folder} is not writable")
    if env_path(path).is_dir():
        raise UsageError(f"--out: {env_path(path)} (the environment file) is a folder")
    return path


def env_path(out: Path) -> Path:
    """FILE.csv -> FILE.env.json beside it."""
    return out.with_name(out.stem + ".env.json")


def parse_request(argv: list[str]) -> MeasureRequest:
    """The validated request; raises UsageError (argparse's own errors exit 2 themselves)."""
    args = build_parser().parse_args(argv)
    device = args.device.strip()
    if device != "cpu" and device != "cuda" and not (
            device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit()):
        raise UsageError(f"--device: unknown '{device}'; allowed: cuda, cuda:N, cpu")
    on_cpu = device == "cpu"
    modes = _choices("--mode", args.mode or ("eager" if on_cpu else "graph"), MODES)
    if on_cpu and "graph" in modes:
        raise UsageError("--mode: graph needs a CUDA GPU; allowed with --device cpu: eager")
    attentions = _choices("--attention", args.attention or ("flash" if on_cpu else "flash,cudnn"),
                          ATTENTION_BACKENDS)
    prefill = _int_list("--prefill", args.prefill, 1) if args.prefill is not None else ()
    whats = _choices("--what", args.what or ("forward,prefill" if prefill else "forward"), WHATS)
    if "prefill" in whats and not prefill:
        raise UsageError("--prefill: --what prefill needs prompt lengths, e.g. --prefill 128,1024")
    if prefill and "prefill" not in whats:
        raise UsageError("--what: --prefill was given, so --what must include prefill")
    batches = _int_list("--batch", args.batch, 1)
    positions = _int_list("--positions", args.positions, 1)
    contexts = _int_list("--context", args.context, 0)
    draft_positions = _int_list("--draft-positions", args.draft_positions, 1)
    prefill_batches = _int_list("--prefill-batch", args.prefill_batch, 1)
    policy = RepPolicy(target_ms=_number("--target-ms", args.target_ms, 1e-3),
                       min_reps=_number("--min-reps", args.min_reps, 1, integer=True),
                       max_reps=_number("--max-reps", args.max_reps, 1, integer=True),
                       warmup=_number("--warmup", args.warmup, 1, integer=True))
    if policy.max_reps < policy.min_reps:
        raise UsageError(f"--max-reps: {policy.max_reps} is below --min-reps {policy.min_reps}; "
                         "allowed: >= --min-reps")
    budget = (_number("--time-budget-s", args.time_budget_s, 1e-3)
              if args.time_budget_s is not None else None)
    seed = _number("--seed", args.seed, 0, integer=True)
    try:
        presets = load_presets(args.presets)
    except CostModelInputError as exc:
        what = exc.allowed if exc.field_name == "presets" else str(exc)  # the file itself
        raise UsageError(f"--presets: {what}") from None
    if args.estimate_gpu not in presets.gpus:
        raise UsageError(f"--estimate-gpu: unknown GPU '{args.estimate_gpu}'; known: "
                         f"{', '.join(sorted(presets.gpus))}")
    tiny = args.tiny or on_cpu
    model_ids = [m.strip() for m in args.model.split(",")]
    named = [("--model", m, positions) for m in dict.fromkeys(model_ids)]
    if args.draft is not None:
        named.append(("--draft", args.draft.strip(), draft_positions))
    specs: dict[str, ModelSpec] = {}
    models = []
    for flag, model_id, model_positions in named:
        if model_id not in presets.models:
            raise UsageError(f"{flag}: unknown model '{model_id}'; known: "
                             f"{', '.join(sorted(presets.models))}")
        try:  # a preset id or a config.json path (read on first use)
            spec = presets.models[model_id]
        except CostModelInputError as exc:
            raise UsageError(f"{flag}: {exc.allowed}") from None
        if spec.n_heads % spec.n_kv_heads:
            raise UsageError(f"{flag}: {model_id} has {spec.n_heads} heads, not a multiple of its "
                             f"{spec.n_kv_heads} KV heads")
        spec = tiny_spec(spec) if tiny else spec
        if spec.model_id in specs:
            raise UsageError(f"{flag}: {model_id} is measured twice; allowed: distinct models")
        specs[spec.model_id] = spec
        models.append((spec.model_id, model_positions))
    configs = build_configs(models, whats, modes, attentions, batches, contexts, prefill,
                            prefill_batches)
    out = _check_out(args.out) if args.out is not None else None
    if out is None and not args.dry_run:
        raise UsageError("--out: required; allowed: a CSV file path, e.g. my-gpu.csv "
                         "(or --dry-run to only print the plan)")
    return MeasureRequest(specs=specs, models=tuple(models), configs=tuple(configs),
                          policy=policy, device=device, out=out, time_budget_s=budget,
                          dry_run=args.dry_run, estimate_gpu=args.estimate_gpu,
                          presets=tuple(args.presets), seed=seed, quiet=args.quiet)


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------
def write_atomic(path: Path, text: str) -> None:
    """Temp file beside `path`, then rename over it: readers never see a partial file. (Kept
    here rather than shared so `measure` never imports the plotting libraries.)"""
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=".tmp-",
                               suffix=path.name)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would (mkstemp makes it private)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def csv_text(rows: list[dict]) -> str:
    """The CSV: plan.COLUMNS, times with 4 decimals (0.1 microsecond)."""
    lines = [",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c])
                              for c in COLUMNS))
    return "\n".join(lines) + "\n"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------------
# Dry run
# ------------------------------------------------------------------------------------------------
def print_plan(req: MeasureRequest) -> None:
    presets = load_presets(req.presets)
    gpu = presets.gpus[req.estimate_gpu]
    keep, skipped = split_by_memory(req.specs, list(req.configs), gpu.memory_bytes)
    seconds = estimate_plan_s(req.specs, keep, req.policy, gpu, presets.params)
    for c, why in skipped:
        print(f"skip (memory): {c.label()}: {why}")
    by_model = {m: sum(c.model == m for c in keep) for m, _ in req.models}
    print(f"plan: {len(keep)} configurations to measure "
          f"({', '.join(f'{m} {n}' for m, n in by_model.items())}), {len(skipped)} skipped "
          f"for memory on {gpu.gpu_id} ({gpu.memory_gb:g} GB); estimated {seconds:.0f} s on "
          f"{gpu.gpu_id} (planning figure from the project's cost model)")


# ------------------------------------------------------------------------------------------------
# Measuring
# ------------------------------------------------------------------------------------------------
def _free_bytes(torch, device) -> tuple[float, float]:
    """(free, total) bytes of the device: CUDA's own figures, or the machine's RAM on the CPU."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return float(free), float(total)
    page = os.sysconf("SC_PAGE_SIZE")
    return (float(os.sysconf("SC_AVPHYS_PAGES") * page),
            float(os.sysconf("SC_PHYS_PAGES") * page))


class _Run:
    """The state of one measuring run: rows, skips, progress and checkpoints."""

    def __init__(self, req: MeasureRequest, torch, device, env: dict):
        self.req, self.torch, self.device, self.env = req, torch, device, env
        self.rows: list[dict] = []
        self.skipped: list[dict] = []
        self.t0 = time.monotonic()
        self.last_write = self.t0
        self.done = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        if not self.req.quiet:
            print(text, file=sys.stderr, flush=True)

    def skip(self, c: Config, reason: str) -> None:
        self.skipped.append({**asdict(c), "reason": reason})
        self.say(f"  skip {c.label()}: {reason}")

    def write(self, complete: bool) -> None:
        self.env.update(finished_utc=_now() if complete else None, complete=complete,
                        elapsed_s=round(self.elapsed(), 1), rows=len(self.rows),
                        skipped=self.skipped)
        write_atomic(self.req.out, csv_text(self.rows))
        write_atomic(env_path(self.req.out), json.dumps(self.env, indent=1) + "\n")
        self.last_write = time.monotonic()

    def over_budget(self, deadline_s: float | None) -> bool:
        return deadline_s is not None and self.elapsed() > deadline_s


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def model_deadlines_s(req: MeasureRequest) -> dict[str, float | None]:
    """Seconds after the start by which each model's configurations must have started: the time
    budget split in proportion to each model's planning estimate, cumulatively (time a model
    leaves unused passes to the next), so an overrun cuts every model's tail, not the last
    model entirely. Each model still measures its first configuration (a bounded overrun)."""
    if req.time_budget_s is None:
        return {m: None for m, _ in req.models}
    presets = load_presets(req.presets)
    gpu = presets.gpus[req.estimate_gpu]
    estimates = {m: estimate_plan_s(req.specs, [c for c in req.configs if c.model == m],
                                    req.policy, gpu, presets.params) for m, _ in req.models}
    total = sum(estimates.values()) or 1.0
    deadlines, cumulative = {}, 0.0
    for m, _ in req.models:
        cumulative += estimates[m]
        deadlines[m] = req.time_budget_s * cumulative / total
    return deadlines


def _measure_model(run: _Run, model: str, configs: list[Config], deadline_s: float | None
                   ) -> None:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from src.measure.model import (
        KVCache,
        attention_only_step,
        forward_step,
        prefill_step,
        random_weights,
    )
    from src.measure.timing import time_step

    req, device = run.req, run.device
    spec = req.specs[model]
    if device.type == "cuda":
        torch.cuda.empty_cache()  # what an earlier model left cached would look used
    free, total = _free_bytes(torch, device)
    margin = memory_margin_bytes(total)
    if spec.weight_bytes + margin > free:
        for c in configs:
            run.skip(c, f"weights need {spec.weight_bytes / GIB:.1f} GiB, "
                        f"{free / GIB:.1f} GiB free")
        return
    run.say(f"{model}: building random BF16 weights ({spec.weight_bytes / GIB:.2f} GiB)")
    weights = random_weights(spec, device, req.seed)
    free = _free_bytes(torch, device)[0] - margin
    fitting = []
    for c in configs:
        need = config_bytes(spec, c)
        if need > free:
            run.skip(c, f"memory: needs {need / GIB:.1f} GiB beside the weights, "
                        f"{max(free, 0) / GIB:.1f} GiB free")
        else:
            fitting.append(c)
    cache_bytes = max((kv_cache_bytes(spec, c) for c in fitting), default=0)
    cache = KVCache(spec, cache_bytes, device, req.seed)
    run.say(f"{model}: KV cache of {cache_bytes / GIB:.2f} GiB; {len(fitting)} configurations")
    measured = 0
    for c in fitting:
        if measured and run.over_budget(deadline_s):  # every model gets at least one row
            run.skip(c, f"time budget: {model}'s share ({deadline_s:.0f} s) of "
                        f"--time-budget-s {req.time_budget_s:g} spent")
            continue
        if cache_bytes + config_bytes(spec, c) - kv_cache_bytes(spec, c) > free:
            run.skip(c, "memory: the shared KV cache leaves too little for its activations")
            continue
        backend = getattr(SDPBackend, SDPA_BACKEND_NAMES[c.attention])
        try:
            with sdpa_kernel([backend]):
                if c.what == "forward":
                    step = forward_step(weights, spec, cache, c.batch, c.positions, c.context,
                                        device, req.seed)
                elif c.what == "attention_only":
                    step = attention_only_step(weights, spec, cache, c.batch, c.positions,
                                               c.context, device, req.seed)
                else:
                    step = prefill_step(weights, spec, cache, c.batch, c.positions, device,
                                        req.seed)
                timing = time_step(step, device, c.mode, req.policy)
        except torch.cuda.OutOfMemoryError:
            step = None
            gc.collect()
            torch.cuda.empty_cache()
            run.skip(c, "out of GPU memory")
            continue
        except RuntimeError as exc:  # no kernel for this shape, or a failed capture
            step = None
            run.skip(c, f"could not run with {c.attention} attention: {_first_line(exc)}")
            continue
        except Exception as exc:  # anything else: note it and go on with the next one
            step = None
            run.skip(c, f"failed: {type(exc).__name__}: {_first_line(exc)}")
            continue
        if device.type == "cuda" and (torch.cuda.memory_reserved(device)
                                      - torch.cuda.memory_allocated(device)) > TRIM_CACHE_BYTES:
            torch.cuda.empty_cache()  # released graph pools: return them before they pile up
        run.done += 1
        measured += 1
        run.rows.append({"model": c.model, "mode": c.mode, "what": c.what,
                         "attention_backend": c.attention, "batch": c.batch,
                         "positions": c.positions, "context": c.context, "tokens": c.tokens,
                         **asdict(timing)})
        run.say(f"[{run.done + len(run.skipped)}/{len(req.configs)} {run.elapsed():6.1f} s] "
                f"{c.label()}: {timing.median_ms:.3f} ms ({timing.reps} reps)")
        if time.monotonic() - run.last_write > CHECKPOINT_EVERY_S:
            run.write(complete=False)


def _kernel_counts(req: MeasureRequest, device) -> dict:
    """{what: {"per_layer", "fixed"}} kernels of this implementation's steps (for `calibrate`'s
    kernels-per-layer term), or why they could not be counted."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from src.measure.model import kernels_per_step

    spec = req.specs[req.models[0][0]]
    attention = req.configs[0].attention if req.configs else "flash"
    out = {}
    for what in dict.fromkeys(c.what for c in req.configs):
        try:
            with sdpa_kernel([getattr(SDPBackend, SDPA_BACKEND_NAMES[attention])]):
                out[what] = kernels_per_step(spec, what, device)
        except Exception as exc:  # a counting aid, never a reason to stop measuring
            out[what] = f"not counted: {type(exc).__name__}: {_first_line(exc)}"
    return out


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def measure(req: MeasureRequest, argv: list[str]) -> int:
    """Measure every configuration of `req`; 0 when at least one row was measured."""
    try:
        import torch
    except ImportError:
        print(f"error: measure needs PyTorch, which this Python does not have; install it with "
              f"`{INSTALL_HINT}` (a CUDA build for a GPU)", file=sys.stderr)
        return 2
    if req.device != "cpu":
        if not torch.cuda.is_available():
            built = torch.version.cuda or "none (a CPU-only build)"
            print(f"error: --device: no CUDA GPU is visible to PyTorch {torch.__version__} "
                  f"(CUDA build: {built}); run on a machine with an NVIDIA GPU, or use "
                  "--device cpu for a tiny smoke run", file=sys.stderr)
            return 2
        index = int(req.device[5:]) if ":" in req.device else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            print(f"error: --device: {req.device} does not exist; this machine has "
                  f"{torch.cuda.device_count()} CUDA device(s)", file=sys.stderr)
            return 2
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # tiny smoke-run steps: waking more threads costs more
    try:
        return _measure_on(req, argv, torch, device)
    finally:
        torch.set_num_threads(threads)


def _measure_on(req: MeasureRequest, argv: list[str], torch, device) -> int:
    from src.measure.machine import describe, gpu_rates, smi_snapshot

    env = {"started_utc": _now(), "arguments": list(argv), **describe(device)}
    env["smi_before"] = smi_snapshot(env.get("gpu_uuid")) if device.type == "cuda" else None
    try:
        env.update(gpu_rates(device))
    except Exception as exc:  # a calibration aid, never a reason to stop
        env["gpu_rates"] = f"not measured: {type(exc).__name__}: {_first_line(exc)}"
    env["kernels"] = _kernel_counts(req, device)
    env["rep_policy"] = asdict(req.policy)
    env["models"] = {m: asdict(req.specs[m]) for m, _ in req.models}
    run = _Run(req, torch, device, env)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a killed run still writes its rows
    run.say(f"measure: {len(req.configs)} configurations on {env.get('gpu', 'cpu')} "
            f"(torch {torch.__version__}); writing {req.out}")
    try:
        deadlines = model_deadlines_s(req)
        for model, _ in req.models:
            _measure_model(run, model, [c for c in req.configs if c.model == model],
                           deadlines[model])
            gc.collect()  # the model's weights, cache and steps are unreachable only now
            if device.type == "cuda":
                torch.cuda.empty_cache()
    except KeyboardInterrupt:
        run.write(complete=False)
        print(f"interrupted: {len(run.rows)} rows written to {req.out}", file=sys.stderr)
        return 130
    except BaseException:
        run.write(complete=False)  # keep what was measured, then report the failure
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    env["smi_after"] = smi_snapshot(env.get("gpu_uuid")) if device.type == "cuda" else None
    run.write(complete=True)
    reasons = {}
    for s in run.skipped:
        key = s["reason"].split(":")[0]
        reasons[key] = reasons.get(key, 0) + 1
    skipped = ", ".join(f"{n} {k}" for k, n in reasons.items()) or "none"
    print(f"measure: {len(run.rows)} rows written to {req.out} in {run.elapsed():.0f} s; "
          f"skipped: {skipped} (reasons in {env_path(req.out)})", file=sys.stderr)
    if not run.rows:
        print("error: no configuration could be measured (see the skip reasons above)",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    try:
        req = parse_request(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if req.dry_run:
        print_plan(req)
        return 0
    return measure(req, argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
