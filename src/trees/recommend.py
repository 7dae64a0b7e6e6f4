"""`recommend`'s token-tree part: the best SGLang draft shape per batch size, as SGLang flags.

Steady state, every sequence at the context asked: speedup(shape, B) = E[tokens per
verification] x t_greedy(B) / (t_verify(shape, B) + t_draft(shape, B)), with the tree costs of
src/treesim/costs.py under engine profile sglang (SGLang's EAGLE worker, whatever --engine says:
these are SGLang's flags) and the tree acceptance model at the i.i.d. top-1 rate --acceptance
with Sequoia's sibling vector (src/treeshape/siblings.py). Shapes searched: S = 1..8, K in 2, 4, 8,
N in TOKENS within SGLang's candidate pool, and the chains S:1:S+1.

SGLang's rules, v0.5.10.post1 (the sglang profile's version), python/sglang/srt/server_args.py
_handle_speculative_decoding: --speculative-num-steps, --speculative-eagle-topk and
--speculative-num-draft-tokens are given together (the auto defaults apply only when num_steps is
unset, and then the other two must be unset too); with topk 1 num_draft_tokens is set to
num_steps + 1; topk > 1 raises with the trtllm_mha backend, with SGLANG_ENABLE_SPEC_V2, and with
page_size > 1 unless the attention backend is flashinfer or fa3 (its message names flashinfer
only); _handle_page_size sets page_size 1 when unset. Other versions differ (design.md).
"""
from __future__ import annotations

import numpy as np

from src.treeshape.fit import tree_tokens
from src.treeshape.shape import TreeShape
from src.treeshape.siblings import SiblingVector
from src.treesim.costs import draft_ms, steady_greedy_ms, steady_step_ms, verify_ms

TOKENS = (4, 6, 8, 12, 16, 24, 32, 48, 64)


def candidate_shapes(max_steps: int = 8) -> list[TreeShape]:
    shapes = [TreeShape.chain(s) for s in range(1, max_steps + 1)]
    for s in range(1, max_steps + 1):
        for k in (2, 4, 8):
            shapes += [TreeShape(s, k, n) for n in TOKENS if n - 1 <= k + (s - 1) * k * k]
    return shapes


def _steps_ms(cost, shape: TreeShape, batches, context: int) -> list:
    """steady_step_ms at each batch (None where the batch does not fit): one array call for all
    the batches (elementwise numpy, the same numbers as one call per batch), else one per batch
    where some batch does not fit (the memory check raises for the whole array)."""
    from src.costmodel import CostModelInputError
    n = np.asarray(batches, dtype=int)
    try:
        ms = verify_ms(cost, shape, n, n * context) + draft_ms(cost, shape, n, n * context)
        return [float(x) for x in ms]
    except CostModelInputError:
        pass
    out = []
    for b in batches:
        try:
            out.append(steady_step_ms(cost, shape, b, context))
        except CostModelInputError:
            out.append(None)
    return out


def best_shapes(cost, alpha: float, batches, context: int, max_steps: int = 8) -> list[dict]:
    """Per batch size: the best shape (tree or chain) and the best chain, with their speedups.
    A shape whose N tokens per sequence do not fit the KV cache at that batch is not a candidate
    there."""
    siblings = SiblingVector()
    shapes = candidate_shapes(max_steps)
    tokens = {s: tree_tokens(alpha, s, siblings) for s in shapes}
    steps = {shape: _steps_ms(cost, shape, batches, context) for shape in shapes}
    out = []
    for i, b in enumerate(batches):
        greedy = steady_greedy_ms(cost, b, context)
        table = [(shape, tokens[shape] * greedy / steps[shape][i]) for shape in shapes
                 if steps[shape][i] is not None]
        best = max(table, key=lambda t: t[1])
        chain = max((t for t in table if t[0].is_chain), key=lambda t: t[1])
        out.append({"batch": int(b), "shape": best[0], "speedup": best[1],
                    "chain": chain[0], "chain_speedup": chain[1]})
    return out


def rate_lines(cost, alpha: float, rates, context: int) -> list[str]:
    """recommend --rate: per request rate, the best shape at the batch that rate runs at (the
    mean running batch its simulation found, rounded; at least 1)."""
    at = [max(1, int(round(b))) for _, b in rates]
    best = {r["batch"]: r for r in best_shapes(cost, alpha, sorted(set(at)), context)}
    out = ["  by request rate (each at the mean running batch simulated above, rounded):"]
    for (rate, _), b in zip(rates, at):
        r = best[b]
        out.append(f"    {rate:g}/s: batch {b}: {r['shape'].label} ({r['speedup']:.2f}x; best "
                   f"chain {r['chain'].label} {r['chain_speedup']:.2f}x)")
    return out


def recommend_lines(scenario, alpha: float, batches, context: int, launch: str,
                    rates=None) -> list[str]:
    """The section's lines; `launch` is the SGLang command before its speculative flags;
    `rates`: (rate, mean running batch) pairs of recommend --rate, answered per rate too."""
    cost = scenario.cost_model("sglang")
    rows = best_shapes(cost, alpha, batches, context)
    lines = [f"SGLang token trees (engine profile sglang, steady state at {context} tokens; tree "
             f"acceptance model: top-1 rate {alpha:g}, Sequoia's sibling vector; 'best chain' is "
             "the fastest chain S:1:S+1 at each batch, where the gamma schedule above keeps the "
             "fewest gammas within its tolerance of the best, so the two may differ):",
             f"  {'batch':>5}  {'best shape':<10} {'speedup':>7}  {'best chain':<10} "
             f"{'speedup':>7}"]
    for r in rows:
        lines.append(f"  {r['batch']:>5}  {r['shape'].label:<10} {r['speedup']:>6.2f}x  "
                     f"{r['chain'].label:<10} {r['chain_speedup']:>6.2f}x")
    if rates:
        lines += rate_lines(cost, alpha, rates, context)
    first = rows[0]
    if first["speedup"] <= 1.0:
        lines.append("  no shape speeds up these batch sizes: serve without speculation")
        return lines
    lines.append(f"  best at batch {first['batch']} ({first['shape'].label}, S:K:N):")
    lines.append(f"  {launch} {first['shape'].sglang_flags}")
    trees_win = [r["batch"] for r in rows if not r["shape"].is_chain]
    if trees_win and len(trees_win) < len(rows):
        above = max(trees_win)
        # a chain may win below a tree's batch too (then no chain lies above the last tree)
        chain_rows = [r for r in rows if r["shape"].is_chain]
        asked = ", ".join(str(r["batch"]) for r in chain_rows)
        where = (f"the table's batch sizes above {above}" if chain_rows[0]["batch"] > above
                 else "where no tree wins")
        # only the batch sizes asked were evaluated: say which, not "above batch X"
        lines.append(f"  (one shape per server: a chain is best at batch {asked} ({where}); for "
                     f"such loads use {chain_rows[0]['chain'].sglang_flags})")
    # SGLang v0.5.10.post1 (the sglang profile's version, engines.toml sgl-0510), server_args.py
    # _handle_speculative_decoding: topk > 1 raises with trtllm_mha, with SGLANG_ENABLE_SPEC_V2,
    # and with page_size > 1 unless the attention backend is flashinfer or fa3
    lines.append("  (SGLang v0.5.10, server_args.py: topk > 1 is refused with the trtllm_mha "
                 "backend, with SGLANG_ENABLE_SPEC_V2=1, and at --page-size > 1 unless "
                 "--attention-backend is flashinfer or fa3; the default page size is 1; other "
                 "versions differ: design.md, section 18)")
    lines.append("vLLM V1 verifies chains only (tree attention removed, PR #42121): its best is "
                 "the chain schedule above.")
    return lines
