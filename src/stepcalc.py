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
--kernels measured|roofline (default: measured where the --engine profile has tables on --gpu):
the GEMMs and decode attention from the engine's measured kernels (src/kernels/, NVIDIA
AIConfigurator's database); the table then adds measured_share (of total_ms priced from measured
rows) and the source of the layer GEMMs, attention and LM head, and says below which tables and
rows it used. Without a table it prices from the roofline and says so in one stderr line; with
--kernels measured that is an error.
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
    hf_ids,
    load_engine_profiles,
    load_presets,
    pass_coefficients,
)
from src.errors import ascii_int
from src.kernels.costmodel import measured_kernels, measured_where
from src.kernels.sources import table_source

COLUMNS = ("batch", "positions", "tokens", "total_ms", "layers_non_attention_ms", "attention_ms",
           "lm_head_ms", "communication_ms", "overhead_ms", "bound", "distinct_experts",
           "vs_decode")
MEASURED_COLUMNS = ("measured_share", "gemm_source", "attention_source", "lm_head_source",
                    "moe_source")
KERNEL_CHOICES = ("measured", "roofline")
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
                    help="model preset id, e.g. llama-3.1-8b or qwen3-30b-a3b, a Hugging Face id "
                    "bundled with aiconfigurator-core, e.g. Qwen/Qwen3-32B, or a path to a "
                    "Hugging Face config.json (required; --list shows the ids)")
    ap.add_argument("--tp", default="1", help="tensor-parallel degree (default 1)")
    ap.add_argument("--ep", default="1",
                    help="expert-parallel degree of a MoE model's experts: 1 (default: TP over "
                    "each expert's FFN, as engines shard by default), the --tp value (whole "
                    "experts per GPU) or between: ep groups of tp/ep GPUs, each expert's FFN "
                    "split over its group (must divide --tp and the routed experts)")
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
    ap.add_argument("--kernels", choices=KERNEL_CHOICES, default=None,
                    help="price GEMMs and decode attention from the engine's measured kernels "
                    f"(NVIDIA AIConfigurator's tables: {measured_where()}) or from the roofline; "
                    "default: measured where --engine has tables on --gpu")
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
    lines += _hf_id_listing(presets)
    lines += ["", "engine profiles (--engine; scenario.engine_profiles):"]
    lines += [f"  {k:<16} {e.description}"
              for k, e in sorted(load_engine_profiles(extra_paths=preset_paths).items())]
    return "\n".join(lines) + "\n"


def _hf_id_listing(presets) -> list[str]:
    """The bundled Hugging Face ids whose architecture the cost model runs (hf_ids.py), each
    read as --model reads it: a preset's repository names that preset."""
    ids = hf_ids.bundled_ids()
    runs = []
    for hf_id in ids:
        try:
            runs.append((hf_id, presets.model(hf_id)))
        except ConfigError:  # an architecture or format the cost model does not run
            continue
    width = max(16, *(len(k) for k, _ in runs)) if runs else 16
    return ["", f"Hugging Face ids (--model; scenario.target, scenario.draft), read offline from "
                f"the {len(ids)} config.json files bundled with {hf_ids.package_label()}: the "
                f"{len(runs)} of an architecture the cost model runs (a preset's repository, as "
                "listed above, names that preset):",
            *(f"  {k:<{width}} {_params_text(m)}, {m.n_layers} layers, {_formats_text(m)}"
              + (f" (= {m.model_id})" if m.model_id != k else "") for k, m in runs)]


def _formats_text(m) -> str:
    experts = m.expert_weight_format
    return m.weight_format + (f", experts {experts}" if experts not in ("", m.weight_format)
                              else "")


def _params_text(m) -> str:
    if m.architecture == "eagle3":  # its embedding is the target's
        own = m.total_params - m.vocab_size * m.hidden_size
        return f"EAGLE-3 head (a draft: scenario.draft), {own / 1e9:.2f} B own parameters"
    text = f"{m.total_params / 1e9:.2f} B parameters"
    if m.n_routed_experts:
        text += (f" ({m.active_params / 1e9:.2f} B active, {m.n_routed_experts} experts top-"
                 f"{m.experts_per_token})")
    return text


def _kernels(args, gpu, profile) -> tuple[object, str]:
    """(MeasuredKernels of --engine on --gpu, "") or (None, the stderr note) as every command
    chooses (src/kernels/costmodel.py measured_kernels); no --engine names no measured kernels."""
    if profile is None:
        if args.kernels == "measured":
            raise ConfigError("--kernels", f"measured: {table_source(args.gpu, None)[1]}; "
                                           "allowed: roofline")
        return None, ""
    return measured_kernels(gpu, profile, args.kernels)


def _rows(args) -> tuple[list[dict], object, str]:
    """(the table's rows, the MeasuredKernels that priced them or None, a stderr note)."""
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
    kernels, note = _kernels(args, gpu, profile)
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
            extra = {}
            if kernels is not None:
                m = _measured(kernels, gpu, model, tp, profile, presets, b, t, context[0], ep[0])
                r = _with_measured(r, m)
                extra = {"measured_ms": m.measured_ms, "gemm_source": m.gemm_source,
                         "attention_source": m.attention_source,
                         "lm_head_source": m.lm_head_source, "notes": m.notes,
                         "attention_kernel": m.attention_kernel, "moe_source": m.moe_source,
                         "moe_kernel": m.moe_kernel}
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
                         else "", "vs_decode": total / decode_ms, **extra})
            if kernels is not None:
                rows[-1]["measured_share"] = extra["measured_ms"] / total
    rows.sort(key=lambda row: (batches.index(row["batch"]), positions.index(row["positions"])))
    return rows, kernels, note


def _measured(kernels, gpu, model, tp, profile, presets, batch, positions, context, ep):
    from src.kernels.pricing import price_pass

    c = pass_coefficients(gpu, model, tp, presets.params, presets.allreduce, engine=profile,
                          attention_fits=presets.attention, ep=ep)
    with np.errstate(all="ignore"):
        return price_pass(kernels, c, gpu, presets.params, model, tp, batch, positions, context,
                          ep, shared_overlap=bool(profile and profile.shared_experts_overlap))


def _with_measured(r, m):
    """The roofline breakdown r with the measured terms of m in place of the roofline's."""
    from dataclasses import replace

    return replace(r, layers_non_attention_ms=r.layers_non_attention_ms + m.layers_delta_ms,
                   attention_ms=r.attention_ms + m.attention_delta_ms,
                   lm_head_ms=r.lm_head_ms + m.lm_head_delta_ms,
                   total_ms=r.total_ms + m.layers_delta_ms + m.attention_delta_ms
                   + m.lm_head_delta_ms)


def kernels_footer(kernels, rows: list[dict]) -> str:
    """Below the table: which tables priced the measured terms, rows rejected, what kept the
    roofline."""
    from src.kernels.sources import package_version

    src = kernels.src
    grid, rejected = kernels.gemm_grid("bfloat16")
    gemm_kernels = ", ".join(grid.kernel_sources) if grid else "-"
    attention = sorted({r["attention_kernel"] for r in rows if r.get("attention_kernel")})
    moe = sorted({r["moe_kernel"] for r in rows if r.get("moe_kernel")})
    lines = [f"kernels: measured where named, from {src.label} tables of aiconfigurator-core "
             f"{package_version()} (GEMM bfloat16: {gemm_kernels}; decode attention: "
             f"{', '.join(attention) or '-'}"
             + (f"; MoE: {', '.join(moe)}" if moe else "") + ")"]
    lines += [f"  rejected: {x.rows} rows of {x.table}: {x.rule}" for x in rejected]
    notes = []
    for r in rows:
        notes += [n for n in r.get("notes", ()) if n not in notes]
    lines += [f"  roofline: {n}" for n in notes]
    return "\n".join(lines) + "\n"


def format_table(rows: list[dict], as_csv: bool) -> str:
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    columns = COLUMNS + (MEASURED_COLUMNS if rows and "measured_share" in rows[0] else ())
    cells = [[cell(r[c]) for c in columns] for r in rows]
    if not as_csv:  # a dense model has no experts: "-" keeps the table's columns whole
        cells = [[v if v != "" else "-" for v in row] for row in cells]
    if as_csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows(cells)
        return buf.getvalue()
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)  # argparse's own errors exit 2
    try:
        if args.list:
            sys.stdout.write(preset_listing(args.presets))
            return 0
        rows, kernels, note = _rows(args)
    except ConfigError as exc:  # a bad option, or a CostModelInputError naming a model field
        flag = FLAG_OF_FIELD.get(exc.field_name)
        if flag is None and "." in exc.field_name:  # a field inside a preset file
            print(f"error: --presets: {exc}", file=sys.stderr)
        else:
            print(f"error: {flag or exc.field_name}: {exc.allowed}", file=sys.stderr)
        return 2
    if note:
        print(note, file=sys.stderr)
    sys.stdout.write(format_table(rows, args.csv))
    if kernels is not None and not args.csv:
        sys.stdout.write(kernels_footer(kernels, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
