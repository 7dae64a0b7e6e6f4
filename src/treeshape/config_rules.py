"""The StudyConfig fields of token trees (`trees`, `sibling_vector`): help texts and rules.

src/config.py builds its Rule from the (parse, what, allowed) triples here: it splits the value
into items (config.list_items, naming `what`) and hands them to parse; this module imports nothing
of src.config, so the two are no import loop.
"""
from __future__ import annotations

from src.errors import ConfigError
from src.treeshape.shape import TreeShapeError, parse_shapes
from src.treeshape.siblings import SEQUOIA_VECTOR, SiblingError, parse_vector

__all__ = ["SEQUOIA_VECTOR", "TREES", "TREES_HELP", "SIBLINGS", "SIBLINGS_HELP"]

TREES_HELP = ("token-tree shapes S:K:N beside the chains of --gammas (SGLang's num_steps, "
              "eagle_topk, num_draft_tokens; chains are G:1:G+1)")
SIBLINGS_HELP = ("Sequoia acceptance vector p_1, p_2, ... of the ranked children (trees use the "
                 "shares p_k / (1 - p_1))")


def _rule(parse):
    def rule(name: str, items: list):
        try:
            return parse(items)
        except (TreeShapeError, SiblingError) as e:
            raise ConfigError(name, str(e)) from None
    return rule


TREES = (_rule(parse_shapes), "S:K:N shapes, e.g. 5:4:8",
         "S:K:N,... with N - 1 <= K + (S - 1) K^2")
SIBLINGS = (_rule(parse_vector), "rates p_1, p_2, ...",
            "p_1, then p_2 >= p_3 >= ... >= 0, sum <= 1")
