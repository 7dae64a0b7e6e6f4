"""`python run.py moe-study`: the MoE scenarios' answers against their dense twins, and the
validation against published MoE measurements.

    python run.py moe-study [--out DIR] [--no-plots] [--scenario FILE ...]

Writes OUT/results/moe_study.csv (one row per scenario, target, quality mode, batch and gamma),
OUT/results/moe_validation.csv, OUT/plots/moe_speedup_vs_batch.png and the MoE section of
OUT/results/summary.txt (the rest of the file, and every other output, is kept). The default run
(`python run.py`) keeps this section and these files. Bad input: one line, exit status 2.
"""
from __future__ import annotations

import sys

from src.config import ConfigError, OneLineArgumentParser

RESULTS = ("results/moe_study.csv", "results/moe_validation.csv")
# Hugging Face repositories of the draft heads the printed engine settings name (MTP needs none:
# its layers ship in the target's checkpoint). An EAGLE-3 head preset carries its own
# (ModelSpec.weights_repository, src/presets/models.toml); this table holds the heads that are no
# preset: the head each such scenario's acceptance came from.
HEAD_REPOSITORIES = {
    "moe-mixtral-8x7b-eagle-2xh100": "yuhuili/EAGLE-mixtral-instruct-8x7B",
}


def head_repositories(scenarios, models) -> dict[str, str]:
    """Per scenario name: its draft head's repository, the preset's where it has one."""
    heads = dict(HEAD_REPOSITORIES)
    for sc in scenarios:
        spec = models.get(sc.draft)
        if spec is not None and spec.weights_repository:
            heads[sc.name] = spec.weights_repository
    return heads

# What an engine does with a scenario's head where that is not the plain case, from its source:
# "sglang": why no SGLang flags are printed (the line replaces them); "vllm": a caveat printed
# under the vLLM settings.
ENGINE_NOTES = {
    "moe-mixtral-8x7b-eagle-2xh100": {
        # The head's config.json names LlamaForCausalLM (NickL77/BaldEagle issue #6 links it).
        # SGLang builds a draft from the architecture its config names and has no remap for that
        # one (python/sglang/srt/configs/model_config.py, _config_draft_model): loaded as a plain
        # Llama it lacks LlamaForCausalLMEagle's weight mapping (the unprefixed keys, the fc
        # layer); SGLang's docs use re-labelled lmsys/sglang-EAGLE-* copies, and
        # sgl-project/sglang PR #33966 (open) describes exactly this.
        "sglang": "no flags printed: SGLang builds an EAGLE draft from the architecture its "
                  "config.json names, and this head's names LlamaForCausalLM, not "
                  "LlamaForCausalLMEagle (no SGLang-format copy of it was found; "
                  "sgl-project/sglang PR #33966)",
        # vLLM maps LlamaForCausalLM to EagleLlamaForCausalLM for method "eagle"
        # (vllm/transformers_utils/configs/eagle.py). vLLM 0.9.2 refused the pair in
        # get_kv_cache_config (the head's 32 KV heads against Mixtral's 8: different page
        # sizes); vLLM main groups full-attention layers that differ only in their KV size
        # (UniformTypeKVCacheSpecs, vllm/v1/core/kv_cache_utils.py get_kv_cache_groups).
        "vllm": "vLLM 0.9.2 refused this head (its 32 KV heads against Mixtral's 8, in "
                "get_kv_cache_config); vLLM main groups layers that differ only in KV-head count "
                "(UniformTypeKVCacheSpecs) and loads it as EagleLlamaForCausalLM, but no run of "
                "the pair is published: check it on your version",
    },
}

# Where the head was trained for a sibling checkpoint of the preset's (same config.json shapes),
# the printed settings name that checkpoint: the acceptance came from it.
TARGET_REPOSITORIES = {
    "moe-qwen3-235b-a22b-eagle3-8xh100": "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "moe-mixtral-8x7b-eagle-2xh100": "mistralai/Mixtral-8x7B-Instruct-v0.1",
}


def build_parser():
    p = OneLineArgumentParser(prog="run.py moe-study", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=".", help="folder whose results/ and plots/ get the outputs "
                                              "(default: the repository)")
    p.add_argument("--no-plots", action="store_true", help="write the numbers only")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--scenario", action="append", default=None,
                   help="a MoE scenario file (repeatable; default: configs/scenarios/moe-*.toml)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from src.hardware.moe_study import moe_scenario_paths
    from src.hardware.scenario import load_scenario
    from src.outputs import locked, prepare, publish, write_error_line
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    try:
        prepare(args.out)
        paths = args.scenario or moe_scenario_paths()
        scenarios = [load_scenario(p) for p in paths]
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from src.costmodel import load_presets
    from src.hardware import moe_report, moe_validation
    from src.hardware.moe_plots import PLOT_NAME, plot_moe_speedup
    from src.hardware.moe_study import run_moe_scenario
    from src.outputs import existing_outputs
    from src.reporting import csv_bytes
    studies = []
    for sc in scenarios:
        say(f"moe-study: {sc.name}")
        studies.append(run_moe_scenario(sc))
    validation = moe_validation.validation_table()
    models = load_presets().models
    section = moe_report.summary_section(studies, models, head_repositories(scenarios, models),
                                         TARGET_REPOSITORIES,
                                         moe_validation.summary_lines(validation), ENGINE_NOTES)
    import pandas as pd

    from src.outputs import block_last
    new = {"results/moe_study.csv": csv_bytes(pd.concat([s.rows for s in studies],
                                                        ignore_index=True)),
           "results/moe_validation.csv": csv_bytes(validation)}
    if not args.no_plots:
        new[f"plots/{PLOT_NAME}"] = plot_moe_speedup(studies)
    try:
        # what other commands wrote into OUT is read under OUT's lock, at swap time (src/outputs.py)
        with locked(args.out, say):
            files = existing_outputs(args.out)
            summary = files.get("results/summary.txt", b"").decode("utf-8", "replace")
            files["results/summary.txt"] = block_last(
                moe_report.replace_section(summary, section)).encode()
            if args.no_plots:
                files.pop(f"plots/{PLOT_NAME}", None)
            files.update(new)
            publish(args.out, files)
    except OSError as exc:
        print(f"error: --out: {write_error_line(exc)}", file=sys.stderr)
        return 2
    say(f"moe-study: wrote {args.out}/results/summary.txt (MoE section), "
        f"{', '.join(RESULTS)}" + ("" if args.no_plots else f", plots/{PLOT_NAME}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
