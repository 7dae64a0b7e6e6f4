"""Plain text for summary.txt's serving sections (by rate and by concurrency): a value with its
interval, and aligned columns."""
from __future__ import annotations

import numpy as np


def value_text(v, digits=2):
    return "-" if not np.isfinite(v) else f"{v:.{digits}f}"


def value_ci_text(row, key, digits=2, scale=1.0):
    v, lo, hi = row[key] * scale, row[f"{key}_ci_low"] * scale, row[f"{key}_ci_high"] * scale
    if not np.isfinite(lo):
        return value_text(v, digits)
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def aligned_table(header, rows, indent="  "):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(r):
        return indent + "  ".join(str(x).ljust(w) for x, w in zip(r, widths))

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
