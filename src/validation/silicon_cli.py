"""`python run.py silicon-validate`: greedy serving against silicon_sample.csv's measured rows.

    python run.py silicon-validate [--refit] [--systems h200_sxm,b200_sxm] [--out DIR] [--quiet]

Writes OUT/results/silicon_validation.csv (one row per aggregated CSV row: inputs, predicted,
measured, error, or the refusal), OUT/results/silicon_validation_summary.csv (per system x
engine x model) and a section of OUT/results/summary.txt. The engine host terms of
src/presets/host_fits.toml (fitted to the h100_sxm rows only) replace the profiles' own where
the file has them; --refit fits them again first (several minutes on 2 cores).
"""
from __future__ import annotations

import sys

from src.config import ConfigError, OneLineArgumentParser

SECTION_BEGIN = "=== SILICON VALIDATION (python run.py silicon-validate) ==="
SECTION_END = "=== END SILICON VALIDATION ==="


def kept_section(out_dir: str) -> str | None:
    """The silicon-validation section of OUT/results/summary.txt, for a study run that rewrites
    the file to keep (silicon_validation.csv is not the study's file, so publish() keeps it)."""
    from src.outputs import kept_summary_section
    return kept_summary_section(out_dir, SECTION_BEGIN, SECTION_END)


def make_parser():
    p = OneLineArgumentParser(prog="python run.py silicon-validate",
                              description=__doc__.splitlines()[0])
    p.add_argument("--refit", action="store_true",
                   help="fit the engines' host terms to the h100_sxm rows first and rewrite "
                        "src/presets/host_fits.toml")
    p.add_argument("--systems", help="simulate only these systems' rows (comma-separated); "
                                     "the others are listed as not run")
    p.add_argument("--attention-dp-only", action="store_true",
                   help="simulate only the rows with attention_dp_size > 1 (an aggregated "
                        "attention-DP replica); the others are listed as not run")
    p.add_argument("--out", default=".", help="output folder (default .)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def run(systems: set[str] | None = None, refit: bool = False, say=lambda m: None,
        attention_dp_only: bool = False):
    """The validation table (a DataFrame in CSV order) and the fits that priced it (rows outside
    `systems`, or without attention DP where attention_dp_only, listed as not run)."""
    import pandas as pd

    from src.costmodel import load_engine_profiles
    from src.costmodel.presets import load_presets
    from src.validation import host_fit
    from src.validation.silicon import COLUMNS, table_row
    from src.validation.silicon_rows import SiliconCase, load_rows, map_row
    from src.validation.silicon_serve import predict
    rows = load_rows()
    engines, presets = set(load_engine_profiles()), load_presets()
    mapped = [map_row(r, engines, presets) for _, r in rows.iterrows()]
    cases = [m for m in mapped if isinstance(m, SiliconCase)]
    fits = host_fit.read_fits()
    if refit:
        keep = host_fit.not_adopted_of()
        records = host_fit.refit(cases, say)
        host_fit.write_fits(records, not_adopted=keep)
        fits = host_fit.read_fits()
    out = []
    for i, ((_, row), m) in enumerate(zip(rows.iterrows(), mapped)):
        pred = None
        if isinstance(m, SiliconCase) and (systems is None or m.system in systems) \
                and (not attention_dp_only or m.attention_dp > 1):
            pred = predict(m, fits.get(m.engine))
        out.append(table_row(row, m, pred))
        if (i + 1) % 200 == 0:
            say(f"  {i + 1}/{len(rows)} rows")
    return pd.DataFrame(out, columns=list(COLUMNS)), fits


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    systems = None
    try:
        if args.systems is not None:
            from src.validation.silicon_rows import load_rows
            known = set(load_rows().system)
            systems = {s.strip() for s in args.systems.split(",")}
            bad = sorted(systems - known) or ([""] if "" in systems else [])
            if bad:
                raise ConfigError("--systems", f"'{bad[0]}' is not a system of the CSV; allowed: "
                                  f"{', '.join(sorted(known))}")
        from src.outputs import prepare
        prepare(args.out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    from src.outputs import block_last, existing_outputs, locked, publish, replace_section
    from src.validation.silicon import markdown, summary, summary_line
    table, _ = run(systems, args.refit, say, args.attention_dp_only)
    with locked(args.out, say):
        files = existing_outputs(args.out)
        text = files.get("results/summary.txt", b"").decode("utf-8", "replace")
        section = f"{SECTION_BEGIN}\n{summary_line(table)}\n{SECTION_END}"
        # the blog check's block stays last, as every writer of summary.txt keeps it
        files["results/summary.txt"] = block_last(replace_section(text, section, SECTION_BEGIN,
                                                                  SECTION_END)).encode()
        files["results/silicon_validation.csv"] = table.to_csv(index=False).encode()
        files["results/silicon_validation_summary.csv"] = summary(table).to_csv(
            index=False, float_format="%.4f").encode()
        publish(args.out, files)
    say(markdown(table))
    return 0
