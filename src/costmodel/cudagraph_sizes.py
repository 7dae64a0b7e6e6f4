"""vLLM V1's CUDA-graph capture sizes: which passes replay a graph and which run eagerly.

vLLM captures graphs for a list of token counts; a pass over more tokens than the largest
(`max_cudagraph_capture_size`) runs without a graph. A speculative step verifies batch x (K + 1)
tokens, so a verification can fall out of the graphs at a batch whose plain decode step stays in
them (vLLM issue #54933: 25 vs 133 tok/s when a 42-token verification ran eagerly).

The rule is `VllmConfig._set_cudagraph_sizes` of vllm/config/vllm.py at vllm-project/vllm commit
09f030eaf851400a83ad3d99f730868f76df0ca7 (read 2026-12-03; its vllm/engine/arg_utils.py has the
`--cudagraph-capture-sizes` and `--max-cudagraph-capture-size` flags and `--compilation-config`
/ `-cc`):

* max = the user's max_cudagraph_capture_size, else min(max_num_seqs x (1 + K) x 2, 512) with
  K = speculative num_speculative_tokens (0 without speculation); then min(max, max_num_batched_
  tokens).
* the user's cudagraph_capture_sizes, deduplicated, those <= max_num_batched_tokens, sorted; else
  [1, 2, 4] <= max, then 8, 16, ... below min(max + 1, 256), then 256, 272, ... <= max.
* the resolved max is the largest size of that list: a user max off the grid is truncated to the
  grid (42 -> 40, the case of issue #54933; a user max that disagrees with a user list is refused).

On main after that commit, PR #50488 (merged 2026-08-29) and PR #54418 (2026-08-30) add the
uniform-decode sizes (batch x (1 + K)) to the default list within the platform ceiling; issue
#54933 (the truncation of an explicit max) is open as of 2026-09-02. design.md, "vLLM's CUDA-graph
capture size".
"""
from __future__ import annotations

from typing import Sequence

VLLM_CAPTURE_SOURCE = ("vllm/config/vllm.py _set_cudagraph_sizes, vllm-project/vllm "
                       "09f030eaf851400a83ad3d99f730868f76df0ca7")
# the default's ceiling in tokens (the same file)
VLLM_DEFAULT_CAPTURE_CEILING = 512
# vllm/engine/arg_utils.py (same commit): compilation_group.add_argument(
# "--max-cudagraph-capture-size", ...); the same field of --compilation-config / -cc JSON
VLLM_CAPTURE_FLAG = "--max-cudagraph-capture-size"
VLLM_CAPTURE_CONFIG_KEY = "max_cudagraph_capture_size"


def vllm_capture_sizes(max_num_seqs: int, num_speculative_tokens: int,
                       max_num_batched_tokens: int, max_capture_size: int | None = None,
                       capture_sizes: Sequence[int] | None = None) -> list[int]:
    """The token counts vLLM captures graphs for (ascending; the rule in the module docstring)."""
    if capture_sizes is not None:
        return sorted({s for s in capture_sizes if s <= max_num_batched_tokens})
    top = max_capture_size
    if top is None:
        top = min(max_num_seqs * (1 + num_speculative_tokens) * 2, VLLM_DEFAULT_CAPTURE_CEILING)
    top = min(max_num_batched_tokens, top)
    sizes = [s for s in (1, 2, 4) if s <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    return sizes


def vllm_max_capture_size(max_num_seqs: int, num_speculative_tokens: int,
                          max_num_batched_tokens: int, max_capture_size: int | None = None,
                          capture_sizes: Sequence[int] | None = None) -> int:
    """The largest token count of a pass that replays a CUDA graph (0: none)."""
    sizes = vllm_capture_sizes(max_num_seqs, num_speculative_tokens, max_num_batched_tokens,
                               max_capture_size, capture_sizes)
    return sizes[-1] if sizes else 0


def smallest_covering_size(tokens: int) -> int:
    """The smallest max_cudagraph_capture_size >= tokens that the default grid keeps as it is
    (1, 2, 4, multiples of 8 below 256, multiples of 16 from 256): what to pass so that a pass of
    `tokens` tokens stays in the graphs at the version above, where a value off the grid is
    truncated down to it."""
    if tokens <= 4:
        return 1 if tokens <= 1 else (2 if tokens == 2 else 4)
    step = 8 if tokens < 256 else 16
    return -(-tokens // step) * step


CAPTURE_SIZE_LIMIT = 1 << 20  # the largest --max-cudagraph-capture-size taken (tokens)


def add_capture_size_argument(parser) -> None:
    """--max-cudagraph-capture-size on a command that builds cost models from a scenario."""
    parser.add_argument(
        VLLM_CAPTURE_FLAG, dest="max_cudagraph_capture_size", default=None,
        help="vLLM's max_cudagraph_capture_size (tokens): passes of more sequences x positions "
             "run without CUDA graphs; a value off vLLM's grid is truncated to it as vLLM does "
             "(default: the engine profile's, from vLLM's default rule)")


def capture_size_option(args, engines: Sequence[str], preset_paths: Sequence[str] = ()
                        ) -> int | None:
    """The validated --max-cudagraph-capture-size of args (None where not given): an integer
    1..CAPTURE_SIZE_LIMIT, for engines of which at least one has a token capture limit."""
    from src.config import ConfigError
    from src.costmodel.engines import engine_profile
    from src.errors import ascii_int
    text = getattr(args, "max_cudagraph_capture_size", None)
    if text is None:
        return None
    try:
        value = ascii_int(str(text))  # int() takes other scripts' digits and '_'
    except ValueError:
        value = 0
    if not 1 <= value <= CAPTURE_SIZE_LIMIT:
        raise ConfigError(VLLM_CAPTURE_FLAG, f"'{text}' is not an integer 1..{CAPTURE_SIZE_LIMIT} "
                                             "(tokens)")
    if not any(engine_profile(e, extra_paths=preset_paths).cuda_graph_max_tokens
               for e in engines):
        raise ConfigError(VLLM_CAPTURE_FLAG, f"engine profile(s) {', '.join(engines)} have no "
                                             "token capture limit; allowed: with vllm-v1 (or a "
                                             "profile with cuda_graph_max_tokens)")
    return value


def with_capture_size(engine, max_capture_size: int | None):
    """The EngineProfile `engine` with vLLM's capture size set to what vLLM resolves
    max_capture_size to (the grid's largest size <= it); unchanged where max_capture_size is None
    or the profile has no token capture limit (SGLang's is by batch, not tokens)."""
    from dataclasses import replace
    if max_capture_size is None or not engine.cuda_graph_max_tokens:
        return engine
    tokens = vllm_max_capture_size(CAPTURE_SIZE_LIMIT, 0, CAPTURE_SIZE_LIMIT, max_capture_size)
    return replace(engine, cuda_graph_max_tokens=tokens)
