"""The tree part of a study run's outputs: its summary section and plot (src/analysis.py hook)."""
from __future__ import annotations

import pandas as pd

from src.reporting import png_bytes
from src.trees.plots import PLOT_NAME, plot_trees
from src.trees.report import summary_text

OUTPUTS = (f"plots/{PLOT_NAME}",)


def tree_part(cfg, reference: pd.DataFrame | None, hardware: dict | None,
              hardware_rows: pd.DataFrame | None, plots: bool = True) -> dict:
    """{"summary": the section or None, "files": {path relative to OUT: bytes}} for the reference
    rows (flat cost) and the hardware scenario's rows, chains and trees together."""
    parts = []
    if reference is not None:
        parts.append(("Reference study (flat cost model: a tree step costs what a chain of S "
                      "costs)", reference.assign(engine_profile="flat"), cfg))
    if hardware is not None and hardware_rows is not None:
        sc = hardware["scenario"]
        parts.append((f"Hardware scenario {sc.name}", hardware_rows, sc.study))
    parts = [p for p in parts if (p[1].tree_topk > 1).any()]
    files = {}
    if plots and parts:
        rows = pd.concat([p[1] for p in parts], ignore_index=True)
        title = parts[-1][0].removeprefix("Hardware scenario ")
        files[f"plots/{PLOT_NAME}"] = png_bytes(plot_trees(rows, title.split(" (")[0]))
    return {"summary": summary_text(parts), "files": files}
