"""The StudyConfig fields of token trees (`trees`, `sibling_vector`): help texts and rules.

src/config.py builds its Rule from (parse, allowed) pairs here; the parse functions import
src.config (list_items) only when called, so config.py can import this module (no import loop).
"""
from __future__ import annotations

from src.errors import ConfigError
from src.trees.shape import TreeShapeError, parse_shapes
from src.trees.siblings import SEQUOIA_VECTOR, SiblingError, parse_vector

__all__ = ["SEQUOIA_VECTOR", "TREES", "TREES_HELP", "SIBLINGS", "SIBLINGS_HELP"]

TREES_HELP = ("token-tree shapes S:K:N beside the chains of --gammas (SGLang's num_steps, "
              "eagle_topk, num_draft_tokens; chains are G:1:G+1)")
SIBLINGS_HELP = ("Sequoia acceptance vector p_1, p_2, ... of the ranked children (trees use the "
                 "shares p_k / (1 - p_1))")


def _rule(name: str, value, parse, what: str):
    from src.config import list_items  # src.config imports this module
    try:
        return parse(list_items(name, value, what))
    except (TreeShapeError, SiblingError) as e:
        raise ConfigError(name, str(e)) from None


TREES = (lambda n, v, m: _rule(n, v, parse_shapes, "S:K:N shapes, e.g. 5:4:8"),
         "S:K:N,... with N - 1 <= K + (S - 1) K^2")
SIBLINGS = (lambda n, v, m: _rule(n, v, parse_vector, "rates p_1, p_2, ..."),
            "p_1, then p_2 >= p_3 >= ... >= 0, sum <= 1")
