"""`python run.py measure-moe`: time MoE layers with random weights and set routing on this GPU.

    python run.py measure-moe --shape qwen3-30b-a3b,mixtral-8x7b --layers 4 \
        --batch 1,2,4,8,16,32,64 --positions 1,2,4,5 --skew 0,1 --out moe.csv
    python run.py measure-moe ... --dry-run      # the plan; no torch needed
    python run.py measure-moe --device cpu --tiny ...   # a tiny-shape smoke run on the CPU

Each row times one pass (decode at positions 1, verification at gamma + 1) through `--layers`
MoE blocks (src/measure/moe_layer.py) whose routing is drawn with the set skew
(src/measure/moe_routing.py: 0 = uniform), and records the mean distinct experts per layer.
`python run.py calibrate-moe` fits the per-expert GEMM terms from these rows. Output: the CSV
(src/measure/moe_plan.py COLUMNS) and FILE.env.json (machine, options), written atomically.
Bad input: one line `error: --flag: what is allowed`, exit status 2, nothing written.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from src.config import OneLineArgumentParser
from src.errors import ascii_float
from src.measure.cli import (
    INSTALL_HINT,
    UsageError,
    _check_out,
    _int_list,
    env_path,
    write_atomic,
)
from src.measure.moe_plan import (
    COLUMNS,
    DEFAULT_SKEWS,
    GIB,
    MODES,
    SHAPES,
    WHAT,
    MoeConfig,
    activation_bytes,
    build_moe_configs,
)
from src.measure.plan import RepPolicy


@dataclass(frozen=True)
class MoeRequest:
    shapes: dict  # column name -> MoeShape
    configs: tuple[MoeConfig, ...]
    layers: int
    device: str
    seed: int
    out: Path
    dry_run: bool
    policy: RepPolicy


def build_parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog="run.py measure-moe", description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="qwen3-30b-a3b,mixtral-8x7b",
                   help=f"MoE layer shapes, comma-separated: {', '.join(SHAPES)} "
                        "(default: %(default)s)")
    p.add_argument("--layers", default="4", help="MoE blocks per timed pass (default: 4)")
    p.add_argument("--batch", default="1,2,4,8,16,32,64",
                   help="sequences per pass, comma-separated (default: %(default)s)")
    p.add_argument("--positions", default="1,2,4,5",
                   help="tokens per sequence: 1 = decode, gamma + 1 = verification "
                        "(default: %(default)s)")
    p.add_argument("--skew", default=",".join(f"{s:g}" for s in DEFAULT_SKEWS),
                   help="routing skew (Zipf exponent of expert popularity; 0 = uniform), "
                        "comma-separated (default: %(default)s)")
    p.add_argument("--mode", default="graph", help="graph and/or eager (default: graph)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: cuda)")
    p.add_argument("--tiny", action="store_true",
                   help="shrink each shape (hidden 64, expert FFN 32, experts and top-k kept) "
                        "for a CPU smoke run")
    p.add_argument("--seed", default="0", help="seed of the weights and routing (default: 0)")
    p.add_argument("--out", default="moe_layer_times_ms.csv", help="output CSV")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    return p


def _skews(text: str) -> tuple[float, ...]:
    out = []
    for part in text.split(","):
        try:
            value = ascii_float(part)
        except ValueError:
            value = float("nan")
        if not value == value or value < 0 or value == float("inf"):
            raise UsageError(f"--skew: '{part}' is not a number >= 0")
        out.append(value)
    return tuple(dict.fromkeys(out))


def parse_request(argv: list[str]) -> MoeRequest:
    args = build_parser().parse_args(argv)
    names = tuple(dict.fromkeys(s.strip() for s in args.shape.split(",")))
    bad = [n for n in names if n not in SHAPES]
    if bad:
        raise UsageError(f"--shape: unknown '{bad[0]}'; allowed: {', '.join(SHAPES)}")
    modes = tuple(dict.fromkeys(m.strip() for m in args.mode.split(",")))
    if any(m not in MODES for m in modes):
        raise UsageError(f"--mode: allowed: {', '.join(MODES)}")
    if args.device != "cpu" and not (args.device == "cuda" or args.device.startswith("cuda:")
                                     and args.device[5:].isascii() and args.device[5:].isdigit()):
        raise UsageError(f"--device: '{args.device}'; allowed: cuda, cuda:N, cpu")
    if args.device == "cpu" and "graph" in modes:
        raise UsageError("--mode: graph needs a CUDA device; use --mode eager with --device cpu")
    layers = _int_list("--layers", args.layers, 1)
    if len(layers) != 1 or layers[0] > 64:
        raise UsageError("--layers: one integer between 1 and 64")
    seed = _int_list("--seed", args.seed, 0)[0]
    shapes = {}
    for n in names:
        shape = SHAPES[n]
        if args.tiny:
            shape = replace(shape, name=f"tiny-{n}", hidden=64, expert_ffn=32)
        shapes[shape.name] = shape
    configs = build_moe_configs(tuple(shapes), modes, _int_list("--batch", args.batch, 1),
                                _int_list("--positions", args.positions, 1), _skews(args.skew))
    return MoeRequest(shapes, tuple(configs), layers[0], args.device, seed,
                      _check_out(args.out), args.dry_run, RepPolicy())


def print_plan(req: MoeRequest) -> None:
    print(f"measure-moe: {len(req.configs)} configurations, {req.layers} layers per pass")
    for name, shape in req.shapes.items():
        n = sum(c.shape == name for c in req.configs)
        print(f"  {name}: h {shape.hidden}, {shape.experts} experts, top-{shape.top_k}, "
              f"expert FFN {shape.expert_ffn}, {shape.shared_experts} shared; weights "
              f"{shape.weight_bytes(req.layers) / GIB:.1f} GiB; {n} configurations")


def csv_text(rows: list[dict]) -> str:
    lines = [",".join(COLUMNS)]
    for r in rows:
        lines.append(",".join(f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c])
                              for c in COLUMNS))
    return "\n".join(lines) + "\n"


def measure(req: MoeRequest, argv: list[str]) -> int:
    try:
        import torch
    except ImportError:
        print(f"error: measure-moe needs PyTorch, which this Python does not have; install it "
              f"with `{INSTALL_HINT}` (a CUDA build for a GPU)", file=sys.stderr)
        return 2
    if req.device != "cpu" and not torch.cuda.is_available():
        print("error: --device: no CUDA GPU is visible to PyTorch; run on a machine with an "
              "NVIDIA GPU, or use --device cpu --mode eager --tiny", file=sys.stderr)
        return 2
    from src.measure.machine import describe
    from src.measure.moe_layer import draw_routing, make_moe_step, random_moe_weights
    from src.measure.timing import time_step

    device = torch.device(req.device)
    env = {"arguments": list(argv), **describe(device), "layers": req.layers,
           "shapes": {n: asdict(s) for n, s in req.shapes.items()},
           "rep_policy": asdict(req.policy), "skipped": []}
    rows, start = [], time.perf_counter()
    for name, shape in req.shapes.items():
        weights = random_moe_weights(shape, req.layers, device, req.seed)
        for i, c in enumerate(x for x in req.configs if x.shape == name):
            if device.type == "cuda":
                free = torch.cuda.mem_get_info(device)[0]
                if activation_bytes(shape, c.tokens) * 4 > free:
                    env["skipped"].append({"config": c.label(), "reason": "memory"})
                    continue
            routed = draw_routing(shape, req.layers, c.tokens, c.skew, req.seed + i)
            t = time_step(make_moe_step(weights, routed, device), device, c.mode, req.policy)
            rows.append({"model": name, "mode": c.mode, "what": WHAT, "batch": c.batch,
                         "positions": c.positions, "tokens": c.tokens, "layers": req.layers,
                         "hidden": shape.hidden, "experts": shape.experts, "top_k": shape.top_k,
                         "expert_ffn": shape.expert_ffn, "shared_experts": shape.shared_experts,
                         "routing_skew": f"{c.skew:g}", "distinct_experts": routed.distinct_mean,
                         "max_expert_rows": routed.max_rows_mean, "median_ms": t.median_ms,
                         "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "min_ms": t.min_ms,
                         "reps": t.reps})
            print(f"  {c.label()}: {t.median_ms:.3f} ms, {routed.distinct_mean:.1f} experts "
                  "per layer", file=sys.stderr)
        del weights
    write_atomic(req.out, csv_text(rows))
    env["elapsed_s"] = round(time.perf_counter() - start, 1)
    write_atomic(env_path(req.out), json.dumps(env, indent=1) + "\n")
    print(f"measure-moe: {len(rows)} rows written to {req.out}", file=sys.stderr)
    return 0 if rows else 1


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
