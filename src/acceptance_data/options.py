"""Command-line options that put measured acceptance into the study.

    --acceptance-from-vllm FILE[,FILE2] [--model-name NAME]   vLLM /metrics snapshot(s)
    --acceptance-length TAU --gamma-measured K                 SGLang-style mean acceptance length
    --acceptance-length TAU --shape-measured S:K:N             ... measured with a token tree
    --acceptance-trace FILE                                    per-request acceptance trace CSV

Each adds quality modes (a per-position mode and, where the input allows one, its i.i.d. stand-in
for the summary's comparison); run.py runs the study with them in place of the default modes.
What was derived is returned as lines for the user to check before anything is simulated.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from src.acceptance_data import sglang, vllm_metrics
from src.config import AlphaDistribution, ConfigError


@dataclass(frozen=True)
class MeasuredAcceptance:
    modes: dict[str, AlphaDistribution] = field(default_factory=dict)  # mode name -> distribution
    lines: tuple[str, ...] = ()  # what was derived, for the user


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "measured acceptance (each replaces the default quality modes; see README, 'Your measured "
        "acceptance')")
    group.add_argument("--acceptance-from-vllm", metavar="FILE[,FILE2]",
                       help="saved text of a vLLM server's /metrics endpoint; two files "
                       "(before,after) "
                            "use the counts between them. Runs the per-position rates it derives "
                            "(vllm_per_position) and the i.i.d. rate with the same mean acceptance "
                            "length (vllm_iid)")
    group.add_argument("--model-name", help="with --acceptance-from-vllm: use only this model_name "
                                            "label (default: sum every model and engine)")
    group.add_argument("--acceptance-length", metavar="TAU",
                       help="mean acceptance length per verification, bonus token included "
                       "(SGLang's "
                            "'accept len', vLLM's 'Mean acceptance length'); needs "
                            "--gamma-measured. "
                            "Turned into an i.i.d. per-token rate: the weaker input")
    group.add_argument("--gamma-measured", metavar="K",
                       help="draft tokens per step when TAU was measured (SGLang: "
                            "--speculative-num-steps of a chain)")
    group.add_argument("--shape-measured", metavar="S:K:N",
                       help="instead of --gamma-measured: the SGLang draft shape TAU was measured "
                       "with (num_steps:eagle_topk:num_draft_tokens); with topk > 1 TAU is a "
                       "tree's accepted length and the rate is fitted to that tree")
    group.add_argument("--acceptance-trace", metavar="FILE",
                       help="CSV with columns request_id,step,proposed,accepted (one row per "
                       "request "
                            "and verification); runs it as trace_per_position and its i.i.d. fit "
                            "as trace_iid")


def measured_acceptance(args: argparse.Namespace,
                        sibling_vector: tuple | None = None) -> MeasuredAcceptance:
    """The modes the options ask for (empty when none is given); ConfigError on bad input.
    `sibling_vector`: the run's Sequoia vector, for a length measured with a tree (None: the
    default)."""
    modes: dict[str, AlphaDistribution] = {}
    lines: list[str] = []
    if args.model_name is not None and args.acceptance_from_vllm is None:
        raise ConfigError("--model-name", "only applies with --acceptance-from-vllm")
    if args.gamma_measured is not None and args.acceptance_length is None:
        raise ConfigError("--gamma-measured", "only applies with --acceptance-length")
    if args.acceptance_from_vllm is not None:
        acc = vllm_metrics.load_vllm_acceptance(args.acceptance_from_vllm, args.model_name)
        modes.update(vllm_metrics.to_modes(acc))
        lines += vllm_metrics.describe(acc)
    if args.shape_measured is not None and args.acceptance_length is None:
        raise ConfigError("--shape-measured", "only applies with --acceptance-length")
    if args.acceptance_length is not None and args.shape_measured is not None:
        from src.acceptance_data.tree_length import acceptance_from_tree_length
        acc = acceptance_from_tree_length(args.acceptance_length, args.shape_measured,
                                          args.gamma_measured, sibling_vector)
        modes[acc.mode_name] = acc.to_mode()
        lines += acc.describe()
    elif args.acceptance_length is not None:
        acc = sglang.acceptance_from_length(args.acceptance_length, args.gamma_measured)
        modes[acc.mode_name] = sglang.to_mode(acc)
        lines += sglang.describe(acc)
    if args.acceptance_trace is not None:
        from src.acceptance_data import traces  # pandas: imported only when a trace is given

        fit = traces.load_trace(args.acceptance_trace)
        modes.update(traces.to_modes(fit))
        lines += traces.describe(fit)
    if modes:
        lines.append(f"quality modes run: {', '.join(modes)}")
    return MeasuredAcceptance(modes, tuple(lines))
