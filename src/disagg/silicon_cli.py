"""`python run.py silicon-validate-disagg`: the disaggregated estimate against silicon_sample.csv.

    python run.py silicon-validate-disagg [--systems h200_sxm,b200_sxm] [--limit N] [--out DIR]
                                          [--quiet]

Writes OUT/results/silicon_disagg_validation.csv (one row per disaggregated CSV row of the
systems: the mapped pools, predicted and measured TPOT/TTFT and their errors, or the refusal)
and prints the summary: coverage, refusals by reason, TPOT median / p90 |error|, TTFT median
|error| (issue 25 section 3's goal: 12%, 30%, 25%). Only when run: no study writes this file;
scripts/update_docs.py makes design.md's silicon-disagg-validation block from it
(src/disagg/silicon_report.py).
"""
from __future__ import annotations

import sys

from src.config import ConfigError, OneLineArgumentParser


def make_parser():
    p = OneLineArgumentParser(prog="python run.py silicon-validate-disagg",
                              description=__doc__.splitlines()[0])
    p.add_argument("--systems", default="h200_sxm,b200_sxm",
                   help="systems whose rows are estimated, comma-separated (default "
                        "h200_sxm,b200_sxm)")
    p.add_argument("--limit", help="estimate at most this many runnable rows (the rest are "
                                   "listed as not run); default all")
    p.add_argument("--out", default=".", help="output folder (default .)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return p


def summary_lines(table) -> list[str]:
    """The headline (coverage and errors against issue 25's goal) and the refusals by kind."""
    from src.disagg.silicon_report import headline, refusal_counts
    refused = refusal_counts(table)
    return [headline(table),
            "refused: " + (", ".join(f"{k} {v}" for k, v in refused.items()) or "none")]


def main(argv: list[str]) -> int:
    args = make_parser().parse_args(argv)
    try:
        from src.disagg.silicon import load_disagg_rows
        known = set(load_disagg_rows().system)
        systems = tuple(s.strip() for s in args.systems.split(","))
        bad = [s for s in systems if s not in known]
        if bad:
            raise ConfigError("--systems", f"'{bad[0]}' has no disaggregated row; allowed: "
                                           f"{', '.join(sorted(known))}")
        limit = None
        if args.limit is not None:
            from src.errors import ascii_int
            try:
                limit = ascii_int(args.limit)
            except ValueError:
                limit = 0
            if limit < 1:
                raise ConfigError("--limit", f"expected an integer >= 1, got {args.limit!r}")
        from src.outputs import prepare
        prepare(args.out)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    say = (lambda m: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    from src.disagg.silicon import run
    from src.outputs import existing_outputs, locked, publish
    table = run(systems, limit, say)
    with locked(args.out, say):
        files = existing_outputs(args.out)
        files["results/silicon_disagg_validation.csv"] = table.to_csv(index=False).encode()
        publish(args.out, files)
    for line in summary_lines(table):
        print(line)
    return 0
