"""Step-time calculator: the hardware cost model's breakdown of one target pass, as a table.

    python run.py step-time --gpu h100-sxm --model llama-3.1-8b --tp 1 --batch 1,8,64 \
        --positions 1,5 --context 2048 [--csv] [--presets MY.toml]
    python run.py step-time --list [--presets MY.toml]     # GPU, model and engine-profile ids

One row per (batch, positions): batch sequences, each verifying `positions` positions (1 = plain
decode, gamma + 1 = a speculative verification) with `context` tokens already in the KV cache.
Columns: batch, positions, tokens, total_ms, layers_non_attention_ms (= vidur's
forward_ms_non_attention), attention_ms, lm_head_ms, communication_ms, overhead_ms, bound,
distinct_experts (expected distinct routed experts each MoE layer reads in the pass; empty for a
dense model: a verification of t positions reads up to t times the experts of a decode step) and
vs_decode (total_ms / the total_ms of the same batch at 1 position: the verification premium).
--model takes a preset id or a path to a Hugging Face config.json.
Bad input: one line `error: --flag: what is allowed` on stderr, exit status 2.
"""
from __future__ import annotations

import argparse
import csv
import io
import sys

import numpy as np

from src.config import ConfigError, OneLineArgumentParser
from src.costmodel import (
    HardwareCostModel,
    forward_pass_breakdown,
    load_engine_profiles,
    load_presets,
)
from src.errors import ascii_int

COLUMNS = ("batch", "positions", "tokens", "total_ms", "layers_non_attention_ms", "attention_ms",
           "lm_head_ms", "communication_ms", "overhead_ms", "bound", "distinct_experts",
           "vs_decode")
# CostModelInputError field names -> the command-line flag that sets them
FLAG_OF_FIELD = {"gpu": "--gpu", "model": "--model", "tp": "--tp", "ep": "--ep",
                 "batch": "--batch",
                 "positions": "--positions", "context": "--context", "presets": "--presets",
                 "batch/context": "--batch/--context"}


def _int_list(flag: str, text: str, minimum: int) -> list[int]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = ascii_int(part)
        except ValueError:
            raise ConfigError(flag, f"'{part}' is not an integer; allowed: comma-separated "
                              f"integers >= {minimum}, e.g. 1,8,64") from None
        if value < minimum:
            raise ConfigError(flag, f"{value} is too small; allowed: integers >= {minimum}")
        values.append(value)
    return values


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineArgumentParser(
        prog="python run.py step-time",
        description="Per-component time of one target forward pass (hardware cost model, ms).")
    ap.add_argument("--list", action="store_true",
                    help="list the GPU, model and engine-profile ids (with --presets: yours too) "
                    "and exit")
    ap.add_argument("--gpu", help="GPU preset id, e.g. h100-sxm (required; --list shows all)")
    ap.add_argument("--model",
                    help="model preset id, e.g. llama-3.1-8b or qwen3-30b-a3b, or a path to a "
                    "Hugging Face config.json (required; --list shows the ids)")
    ap.add_argument("--tp", default="1", help="tensor-parallel degree (default 1)")
    ap.add_argument("--ep", default="1",
                    help="expert-parallel degree of a MoE model's experts: 1 (default: TP over "
                    "each expert's FFN, as engines shard by default) or the --tp value "
                    "(experts spread over the GPUs; must divide the routed experts)")
    ap.add_argument("--batch", default="1", help="comma-separated batch sizes (default 1)")
    ap.add_argument("--positions", default="1",
                    help="comma-separated positions per sequence: 1 = decode, gamma+1 = verify")
    ap.add_argument("--context", default="2048",
                    help="tokens already cached per sequence (default 2048)")
    ap.add_argument("--presets", action="append", default=[], metavar="FILE.toml",
                    help="extra preset file merged over the built-ins (repeatable)")
    ap.add_argument("--engine", default=None,
                    help="engine profile of src/presets/engines.toml (ideal, vllm-2024, vllm-v1, "
                    "sglang, sglang-spec-v2) whose overhead goes in "
                         "overhead_ms, verification extras included for positions > 1; default: "
                         "the CostModelParams CPU figures (decode-step CPU only)")
    ap.add_argument("--csv", action="store_true", help="print CSV instead of an aligned table")
    return ap


def preset_listing(preset_paths: list[str]) -> str:
    """The ids that --gpu, --model and --engine accept (and scenario files name), one per line."""
    presets = load_presets(preset_paths)
    lines = ["GPUs (--gpu; scenario.gpu):"]
    lines += [f"  {k:<16} {g.name}, {g.memory_gb:g} GB, {g.memory_bandwidth_gb_per_s:g} GB/s, "
              f"{g.dense_bf16_tflops:g} dense BF16 TFLOP/s"
              for k, g in sorted(presets.gpus.items())]
    lines += ["", "models (--model; scenario.target, scenario.draft):"]
    width = max(16, *(len(k) for k in presets.models))
    lines += [f"  {k:<{width}} {m.hf_name}, {_params_text(m)}, {m.n_layers} layers"
              for k, m in sorted(presets.models.items())]
    lines += ["", "engine profiles (--engine; scenario.engine_profiles):"]
    lines += [f"  {k:<16} {e.description}"
              for k, e in sorted(load_engine_profiles(extra_paths=preset_paths).items())]
    return "\n".join(lines) + "\n"


def _params_text(m) -> str:
    if m.architecture == "eagle3":  # its embedding is the target's
        own = m.total_params - m.vocab_size * m.hidden_size
        return f"EAGLE-3 head (a draft: scenario.draft), {own / 1e9:.2f} B own parameters"
    text = f"{m.total_params / 1e9:.2f} B parameters"
    if m.n_routed_experts:
        text += (f" ({m.active_params / 1e9:.2f} B active, {m.n_routed_experts} experts top-"
                 f"{m.experts_per_token})")
    return text


def _rows(args) -> list[dict]:
    for flag, value in (("--gpu", args.gpu), ("--model", args.model)):
        if value is None:
            raise ConfigError(flag, "required; 'python run.py step-time --list' shows the ids")
    (tp,) = _int_list("--tp", args.tp, 1) if "," not in args.tp else (None,)
    if tp is None:
        raise ConfigError("--tp", "one integer >= 1 is allowed")
    batches = _int_list("--batch", args.batch, 1)
    positions = _int_list("--positions", args.positions, 1)
    context = _int_list("--context", args.context, 0)
    if len(context) != 1:
        raise ConfigError("--context", "one integer >= 0 is allowed")
    ep = _int_list("--ep", args.ep, 1)
    if len(ep) != 1:
        raise ConfigError("--ep", "one integer >= 1 is allowed")
    presets = load_presets(args.presets)
    gpu = presets.gpu(args.gpu)
    model = presets.model(args.model)
    engine = profile = None
    if args.engine is not None:
        profiles = load_engine_profiles(extra_paths=args.presets)
        if args.engine not in profiles:
            raise ConfigError("--engine",
                              f"unknown '{args.engine}'; allowed: {', '.join(sorted(profiles))}")
        profile = profiles[args.engine]
        engine = HardwareCostModel.from_presets(args.gpu, args.model, tp=tp,
                                                preset_paths=args.presets,
                                                engine=profile, ep=ep[0])
    rows = []
    for b in batches:
        decode_ms = None
        for t in sorted(set(positions) | {1}):
            # the engine's implementation (kernel counts, attention kernel) shapes the physics
            with np.errstate(all="ignore"):  # an overflow is refused below, not warned about
                r = forward_pass_breakdown(gpu, model, tp, b, t, context[0], presets.params,
                                           presets.allreduce, engine=profile,
                                           attention_fits=presets.attention, ep=ep[0])
            if not np.isfinite([r.total_ms, r.attention_ms, r.lm_head_ms]).all():
                raise ConfigError("--presets" if args.presets else "--gpu",
                                  f"{args.gpu} with {args.model} gives a step time of "
                                  f"{r.total_ms} ms at batch {b}, positions {t}: its figures "
                                  "overflow the cost model; allowed: datasheet-scale figures")
            overhead = r.overhead_ms + r.launch_ms
            if engine is not None:  # the profile's overhead of this target pass (with launches)
                overhead = float(engine.target_pass_parts(
                    np.ones((1, b), bool), t, np.full((1, b), context[0]))[1][0])
            total = r.total_ms - r.overhead_ms - r.launch_ms + overhead
            decode_ms = total if t == 1 else decode_ms
            if t not in positions:
                continue
            rows.append({"batch": b, "positions": t, "tokens": r.tokens, "total_ms": total,
                         "layers_non_attention_ms": r.layers_non_attention_ms,
                         "attention_ms": r.attention_ms, "lm_head_ms": r.lm_head_ms,
                         "communication_ms": r.communication_ms, "overhead_ms": overhead,
                         "bound": r.bound,
                         "distinct_experts": r.distinct_experts if model.n_routed_experts
                         else "", "vs_decode": total / decode_ms})
    rows.sort(key=lambda row: (batches.index(row["batch"]), positions.index(row["positions"])))
    return rows


def format_table(rows: list[dict], as_csv: bool) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    cells = [[cell(r[c]) for c in COLUMNS] for r in rows]
    if not as_csv:  # a dense model has no experts: "-" keeps the table's columns whole
        cells = [[v if v != "" else "-" for v in row] for row in cells]
    if as_csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows(cells)
        return buf.getvalue()
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # argparse's own errors exit 2
    try:
        if args.list:
            sys.stdout.write(preset_listing(args.presets))
            return 0
        rows = _rows(args)
    except ConfigError as exc:  # a bad option, or a CostModelInputError naming a model field
        flag = FLAG_OF_FIELD.get(exc.field_name)
        if flag is None and "." in exc.field_name:  # a field inside a preset file
            print(f"error: --presets: {exc}", file=sys.stderr)
        else:
            print(f"error: {flag or exc.field_name}: {exc.allowed}", file=sys.stderr)
        return 2
    sys.stdout.write(format_table(rows, args.csv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
