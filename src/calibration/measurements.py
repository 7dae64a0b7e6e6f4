"""The project's measurement format: one CSV row per timed forward pass.

The columns `calibrate` reads (others, such as tokens, p10_ms, p90_ms, min_ms, reps, are ignored):

    model              model preset id (src/presets/models.toml), e.g. llama-3.1-8b
    mode               graph (the pass replayed from a CUDA graph) or eager (plain launches)
    what               forward (the whole pass), attention_only (per layer only the KV-cache
                       write and the attention kernel, plus embedding, final norm and LM head),
                       or prefill (a prompt: causal attention, LM head on the last position)
    attention_backend  flash (FlashAttention-2) or cudnn (cuDNN fused attention)
    batch              sequences in the pass, >= 1
    positions          new positions per sequence, >= 1 (1 = decode, gamma + 1 = verification;
                       the prompt length for prefill)
    context            tokens already in each sequence's KV cache, >= 0
    median_ms          median time of the pass, ms, > 0

`python run.py measure` writes it (measurements/h200-2026-11-29, which the shipped H200
calibration is fitted to); the other H200 session beside the project uses it too.
"""
from __future__ import annotations

import io
import math

import pandas as pd

from src.config import ConfigError, read_text_file
from src.errors import ascii_float

REQUIRED_COLUMNS = ("model", "mode", "what", "attention_backend", "batch", "positions", "context",
                    "median_ms")
MODES = ("graph", "eager")
WHATS = ("forward", "attention_only", "prefill")
BACKENDS = ("flash", "cudnn")


class CalibrationInputError(ConfigError):
    """Bad input to `calibrate`: one line naming the field (a flag, a column) and what is
    allowed."""


def _read_csv(path: str, flag: str, required: tuple, where: str) -> pd.DataFrame:
    """A measurement CSV as strings, through the project's one file reader (regular files only,
    capped: src/input_files.py), with every `required` column present; `where` names the format."""
    text = read_text_file(path, flag, "a CSV file", CalibrationInputError)
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else "no columns"
        raise CalibrationInputError(flag, f"{path} is not a CSV file ({reason})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise CalibrationInputError(
            flag, f"{path} lacks column(s) {', '.join(missing)}; required: "
                  f"{', '.join(required)} ({where})")
    return df


def read_measurements(path: str, known_models, flag: str = "--measurements") -> pd.DataFrame:
    """The rows of a measurement CSV, checked: every required column present, ids known, sizes
    integers in range, times finite and > 0. Raises CalibrationInputError naming the problem."""
    df = _read_csv(path, flag, REQUIRED_COLUMNS, "README, 'Measurement format'")
    if df.empty:
        raise CalibrationInputError(flag, f"{path} has no rows")
    df = df[list(REQUIRED_COLUMNS)].copy()
    for column, allowed in (("model", sorted(known_models)), ("mode", MODES), ("what", WHATS),
                            ("attention_backend", BACKENDS)):
        values = df[column].str.strip()
        bad = sorted(set(values) - set(allowed))
        if bad:
            row = int(values.isin(bad).to_numpy().argmax()) + 2  # 1-based, after the header
            raise CalibrationInputError(
                f"{column} (line {row})", f"unknown '{bad[0]}'; allowed: {', '.join(allowed)}")
        df[column] = values
    for column, minimum in (("batch", 1), ("positions", 1), ("context", 0)):
        df[column] = [_integer(column, text, minimum, i + 2) for i, text in enumerate(df[column])]
    df["median_ms"] = [_time_ms(text, i + 2) for i, text in enumerate(df["median_ms"])]
    return df.reset_index(drop=True)


def _integer(column: str, text: str, minimum: int, line: int) -> int:
    try:
        value = ascii_float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value) or value < minimum:
        raise CalibrationInputError(f"{column} (line {line})",
                                    f"'{text}' is not an integer >= {minimum}")
    return int(value)


def _time_ms(text: str, line: int) -> float:
    try:
        value = ascii_float(text)
    except ValueError:
        raise CalibrationInputError(
            f"median_ms (line {line})",
            f"'{text}' is not a number; allowed: a time in ms > 0") from None
    if not math.isfinite(value) or value <= 0:
        raise CalibrationInputError(f"median_ms (line {line})",
                                    f"{text} is not a time; allowed: a finite number of ms > 0")
    return value


# ------------------------------------------------------------------------------------------------
# MoE layer rows (`python run.py measure-moe`, src/measure/moe_plan.py), what = moe_layer: one
# timed pass of `layers` MoE blocks of batch x positions tokens, fitted by `calibrate-moe`
# (src/calibration/moe_fit.py). Columns beyond the dense format's:
#     tokens             batch x positions
#     layers             MoE blocks in the timed pass, >= 1
#     hidden, experts, top_k, expert_ffn, shared_experts   the block's shape (config.json)
#     routing_skew       Zipf exponent of expert popularity the routing was drawn with (0 uniform)
#     distinct_experts   mean over the blocks of the distinct experts the pass touched, > 0
#     max_expert_rows    mean over the blocks of the most rows one expert received
# ------------------------------------------------------------------------------------------------
MOE_WHAT = "moe_layer"
MOE_COLUMNS = ("model", "mode", "what", "batch", "positions", "tokens", "layers", "hidden",
               "experts", "top_k", "expert_ffn", "shared_experts", "routing_skew",
               "distinct_experts", "max_expert_rows", "median_ms")


def read_moe_measurements(path: str, flag: str = "--measurements") -> pd.DataFrame:
    """The moe_layer rows of a `measure-moe` CSV, checked (columns present, sizes integers in
    range, top_k <= experts, distinct experts between 1 and min(experts, tokens x top_k), times
    finite and > 0). Raises CalibrationInputError naming the problem."""
    df = _read_csv(path, flag, MOE_COLUMNS, "the rows `python run.py measure-moe` writes")
    df = df[df["what"].str.strip() == MOE_WHAT][list(MOE_COLUMNS)].copy()
    if df.empty:
        raise CalibrationInputError(flag, f"{path} has no rows with what = {MOE_WHAT}")
    for column, minimum in (("batch", 1), ("positions", 1), ("tokens", 1), ("layers", 1),
                            ("hidden", 1), ("experts", 1), ("top_k", 1), ("expert_ffn", 1),
                            ("shared_experts", 0)):
        df[column] = [_integer(column, text, minimum, i + 2)
                      for i, text in zip(df.index, df[column])]
    for i, row in zip(df.index, df.itertuples(index=False)):
        if row.top_k > row.experts:
            raise CalibrationInputError(f"top_k (line {i + 2})",
                                        f"{row.top_k} > experts {row.experts}")
    df["median_ms"] = [_time_ms(text, i + 2) for i, text in zip(df.index, df["median_ms"])]
    for column in ("routing_skew", "distinct_experts", "max_expert_rows"):
        df[column] = [_number(column, text, i + 2) for i, text in zip(df.index, df[column])]
    most = [min(e, t * k) for e, t, k in zip(df["experts"], df["tokens"], df["top_k"])]
    for i, d, m in zip(df.index, df["distinct_experts"], most):
        if not 1 <= d <= m:
            raise CalibrationInputError(
                f"distinct_experts (line {i + 2})",
                f"{d:g} is not between 1 and min(experts, tokens x top_k) = {m}")
    return df.reset_index(drop=True)


def _number(column: str, text: str, line: int) -> float:
    try:
        value = ascii_float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise CalibrationInputError(f"{column} (line {line})",
                                    f"'{text}' is not a finite number >= 0")
    return value
