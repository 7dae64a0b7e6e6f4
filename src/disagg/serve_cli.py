"""`python run.py serve`: a scenario file with a [disagg] table runs the disaggregated sweep
(src/disagg/serve.py); every other run is src/online/cli.py's, unchanged.

The dispatch reads the --scenario file once: where it cannot (no --scenario, a missing or bad
file, no [disagg] table), src/online/cli.py runs with the same arguments and says what is wrong.
"""
from __future__ import annotations


def main(argv: list[str]) -> int:
    from src.online import cli
    path = cli.make_parser().parse_known_args(argv)[0].scenario  # as cli.main will read it
    document = None
    if path is not None:
        from src.config import ConfigError, read_toml
        try:
            document = read_toml(path, "--scenario")
        except ConfigError:
            document = None
    if document is None or "disagg" not in document:
        return cli.main(argv)
    from src.disagg.serve import disagg_setup
    rest = {k: v for k, v in document.items() if k != "disagg"}
    return cli.main(argv, document=rest, setup=disagg_setup(document["disagg"]))
