"""The summary's section on token trees: which shape at which batch size, and when a chain wins.

For every (engine profile, quality mode, serving mode) of a run that has tree rows: per batch
size the best tree (topk > 1) and the best chain by simulated speedup with their confidence
intervals, which of tree, chain or plain decoding wins (a win needs disjoint intervals), the
accepted-length gain of the tree over that chain and how much of it survives as speedup; then
the batch size from which on the tree never wins. Last, for the run's tree sizes N, the expected
tokens per verification of SGLang's selection beside Sequoia's optimal tree of the same N
(closed form, the mode's representative request).
"""
from __future__ import annotations

import pandas as pd

from src.sweep import GRID_KEYS, TREE_KEYS

CONTEXT_COLUMNS = ("engine_profile", "quality_mode", "serving_mode")


def split_trees(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(chain rows, tree rows) of a sweep's table; the chain rows keep their order and index."""
    trees = df.tree_topk > 1
    return df[~trees].reset_index(drop=True), df[trees].reset_index(drop=True)


def with_trees(chains: pd.DataFrame, trees: pd.DataFrame | None) -> pd.DataFrame:
    """Chain and tree rows in the sweep's row order (the chains alone when there are no trees)."""
    if trees is None or trees.empty:
        return chains
    keys = [k for k in ("engine_profile",) if k in chains] + list(GRID_KEYS + TREE_KEYS)
    order = {k: list(dict.fromkeys(chains[k])) for k in ("engine_profile", "quality_mode",
                                                          "serving_mode") if k in chains}
    both = pd.concat([chains, trees], ignore_index=True)
    for k, values in order.items():
        both[k] = pd.Categorical(both[k], categories=values, ordered=True)
    both = both.sort_values(keys, kind="stable").reset_index(drop=True)
    for k in order:
        both[k] = both[k].astype(str)
    return both


def shape_label(row) -> str:
    if int(row.tree_topk) == 1:
        return f"chain {int(row.gamma)}"
    return f"{int(row.tree_steps)}:{int(row.tree_topk)}:{int(row.tree_tokens)}"


def _ci(row) -> str:
    return f"{row.speedup:.2f}x [{row.speedup_ci_low:.2f}, {row.speedup_ci_high:.2f}]"


def best_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (context, batch): best tree and best chain by speedup, with the verdict."""
    out = []
    keys = [k for k in CONTEXT_COLUMNS if k in rows] + ["batch_size"]
    for key, g in rows.groupby(keys, sort=False):
        trees, chains = g[g.tree_topk > 1], g[g.tree_topk == 1]
        if trees.empty or chains.empty:
            continue
        t = trees.loc[trees.speedup.idxmax()]
        c = chains.loc[chains.speedup.idxmax()]
        if max(t.speedup_ci_high, c.speedup_ci_high) < 1.0:
            verdict = "no speculation"
        elif t.speedup_ci_low > c.speedup_ci_high:
            verdict = "tree"
        elif c.speedup_ci_low > t.speedup_ci_high:
            verdict = "chain"
        else:
            verdict = "tie"
        out.append({**dict(zip(keys, key)), "tree": t, "chain": c, "verdict": verdict,
                    "tree_ties": _ties(trees, t), "chain_ties": _ties(chains, c)})
    return pd.DataFrame(out)


def _ties(shapes: pd.DataFrame, best) -> list[str]:
    """Labels of the other shapes whose interval reaches the best's (their order is noise)."""
    others = shapes[(shapes.speedup_ci_high >= best.speedup_ci_low) & (shapes.index != best.name)]
    return [shape_label(r) for _, r in others.sort_values("speedup", ascending=False).iterrows()]


def tie_lines(best: pd.DataFrame) -> list[str]:
    """Where another shape's interval overlaps the best tree's or chain's: the best of those is
    the best by its mean only, so a change of best shape between batch sizes may be noise."""
    parts = []
    for _, r in best.sort_values("batch_size").iterrows():
        ties = [f"{shape_label(b)} ~ {', '.join(t)}" for b, t in
                ((r.tree, r.tree_ties), (r.chain, r.chain_ties)) if t]
        if ties:
            parts.append(f"batch {int(r.batch_size)}: {'; '.join(ties)}")
    if not parts:
        return []
    lines = ["    within the best's 95% CI (which of these is best is noise):"]
    for part in parts:  # one batch size's ties are never split across lines
        if len(lines) > 1 and len(lines[-1]) + 3 + len(part) <= 100:
            lines[-1] += " | " + part
        else:
            lines.append("      " + part)
    return lines


def edge_lines(best: pd.DataFrame, rows: pd.DataFrame) -> list[str]:
    """A line where the best tree is the grid's largest (most tokens N, or deepest S): the optimum
    may lie beyond the shapes tried, as a best gamma at the top of the gamma grid may."""
    trees = rows[rows.tree_topk > 1]
    top_n, top_s = int(trees.tree_tokens.max()), int(trees.tree_steps.max())
    at_edge = [r for _, r in best.sort_values("batch_size").iterrows()
               if int(r.tree.tree_tokens) == top_n or int(r.tree.tree_steps) == top_s]
    if not at_edge:
        return []
    where = ", ".join(f"{shape_label(r.tree)} at batch {int(r.batch_size)}" for r in at_edge)
    return [f"    at the edge of the tree grid (largest N {top_n} or depth S {top_s} tried): "
            f"{where}; a larger tree may be faster: add one to --trees (N - 1 <= K + (S - 1) "
            "K^2)"]


def tree_loses_from(best: pd.DataFrame) -> int | None:
    """Smallest batch size from which on the tree never wins (None if it wins at the largest)."""
    b = best.sort_values("batch_size")
    wins = list(b.verdict == "tree")
    if wins and wins[-1]:
        return None
    last_win = max((i for i, w in enumerate(wins) if w), default=-1)
    return int(b.batch_size.iloc[last_win + 1])


def run_shape(r) -> str:
    """What to run at a batch: the tree where it wins, plain decoding where neither speeds up,
    else the best chain (a tie goes to the chain: it needs no tree attention)."""
    if r.verdict == "tree":
        return shape_label(r.tree)
    if r.verdict == "no speculation":
        return "none"
    return shape_label(r.chain)


def sglang_flags(label: str) -> str:
    """SGLang's three flags for a shape label ('S:K:N' or 'chain G'); SGLang needs all three."""
    from src.treeshape.shape import TreeShape, parse_shape
    if label == "none":
        return "no speculation (leave out --speculative-algorithm)"
    if label.startswith("chain "):
        return TreeShape.chain(int(label.split()[1])).sglang_flags
    return parse_shape(label).sglang_flags


def flag_lines(best: pd.DataFrame) -> list[str]:
    """One line per run of consecutive batch sizes that share the shape to run (run_shape)."""
    groups: list[tuple[str, list[int]]] = []
    for _, r in best.sort_values("batch_size").iterrows():
        label = run_shape(r)
        if groups and groups[-1][0] == label:
            groups[-1][1].append(int(r.batch_size))
        else:
            groups.append((label, [int(r.batch_size)]))
    out = ["    as SGLang flags:"]
    for label, batches in groups:
        which = "batch " + ", ".join(map(str, batches))
        out.append(f"      {which:<16} {sglang_flags(label)}")
    return out


def summary_text(parts: list[tuple[str, pd.DataFrame, object]]) -> str | None:
    """The section for parts (title, chain + tree rows, StudyConfig); None without tree rows."""
    parts = [p for p in parts if p[1] is not None and (p[1].tree_topk > 1).any()]
    if not parts:
        return None
    out = ["Token trees at batch > 1", "=" * 24, "",
           "Best SGLang tree (S:K:N = num_steps:eagle_topk:num_draft_tokens) and best chain per "
           "batch size, simulated speedup over greedy with 95% CI; 'wins' needs disjoint CIs "
           "(design.md, 'Token trees'). 'tokens': the best tree's tokens per step over the best "
           "chain's (that chain's length, not the tree's depth), 'speed': the tree's speedup over "
           "the chain's; 'speed' below 'tokens' is what the tree's extra verification and draft "
           "work costs of the gain. Under each table, the shape to run per batch size as SGLang "
           "flags (the tree where it wins, else the best chain)."]
    for title, rows, cfg in parts:
        best = best_rows(rows)
        out += ["", title]
        for key, g in best.groupby([k for k in CONTEXT_COLUMNS if k in best], sort=False):
            ctx = dict(zip([k for k in CONTEXT_COLUMNS if k in best], key))
            out.append(f"  {' / '.join(str(v) for v in ctx.values())}")
            out.append(f"    {'batch':>5}  {'best tree':<10} {'speedup [95% CI]':<23} "
                       f"{'best chain':<10} {'speedup [95% CI]':<23} {'tokens':>7} {'speed':>7}"
                       "  wins")
            for _, r in g.sort_values("batch_size").iterrows():
                t, c = r.tree, r.chain
                out.append(f"    {int(r.batch_size):>5}  {shape_label(t):<10} {_ci(t):<23} "
                           f"{shape_label(c):<10} {_ci(c):<23} "
                           f"{t.tokens_per_step / c.tokens_per_step - 1:>+7.0%} "
                           f"{t.speedup / c.speedup - 1:>+7.0%}  {r.verdict}")
            loses = tree_loses_from(g)
            if loses is None:
                out.append("    the tree still wins at the largest batch size")
            elif loses == int(g.batch_size.min()):
                out.append("    the tree wins at no batch size: a chain (or plain decoding) is "
                           "at least as good everywhere")
            else:
                out.append(f"    from batch {loses} on a chain (or plain decoding) is at least "
                           "as good as every tree")
            out += edge_lines(g, rows)
            out += tie_lines(g)
            out += flag_lines(g)
        out += sequoia_lines(rows, cfg)
    return "\n".join(out)


def sequoia_lines(rows: pd.DataFrame, cfg) -> list[str]:
    """SGLang's selection vs Sequoia's optimum, expected tokens per verification (closed form)."""
    from src.treeshape.select import sglang_tree
    from src.treeshape.sequoia import sequoia_tree
    from src.treeshape.shape import TreeShape
    from src.treeshape.siblings import child_probabilities, vector_siblings
    from src.treeshape.tree import expected_tokens
    from src.treesim.grid import representative_alpha
    from src.treesim.serve import representative_rates
    from src.workload import acceptance_profile
    if cfg is None:
        return []
    siblings = vector_siblings(cfg.sibling_vector)
    shapes = sorted({TreeShape(int(s), int(k), int(n)) for s, k, n in
                     rows[rows.tree_topk > 1][list(TREE_KEYS)].drop_duplicates().itertuples(
                         index=False)}, key=lambda s: (s.tokens, s.steps, s.topk))
    out = ["", "  SGLang's selection vs Sequoia's optimal tree of the same size N (expected tokens "
               "per verification, closed form, the mode's median request; Sequoia's depth is "
               "not capped at S)",
           "    " + f"{'mode':<28}" + "".join(f"{s.label:>15}" for s in shapes)]
    for mode in dict.fromkeys(rows.quality_mode):
        dist = cfg.alpha_modes[mode]
        alpha = representative_alpha(cfg.seed, mode, dist)
        profile = acceptance_profile(dist)
        cells = []
        for s in shapes:
            width = max(s.topk, len(siblings.rates) + 1)
            q = child_probabilities(representative_rates(alpha, profile, s.tokens),
                                    siblings.shares, width)
            ours = expected_tokens(sglang_tree(s, q), q)
            _, best = sequoia_tree(s.tokens, q)
            cells.append(f"{ours:.2f} / {best:.2f}")
        out.append(f"    {mode:<28}" + "".join(f"{c:>15}" for c in cells))
    return out


def readme_headline(rows: pd.DataFrame) -> str:
    """README's tree findings, from the tree study's results.csv (chain and tree rows): per engine
    profile and serving mode, the quality modes grouped by the batch size from which a chain (or
    plain decoding) is at least as good as every tree (tree_loses_from), and the best tree at
    the smallest batch size."""
    best = best_rows(rows)
    keys = [k for k in ("engine_profile", "serving_mode") if k in best]
    lines = []
    for key, g in best.groupby(keys, sort=False):
        where = " / ".join(str(v) for v in (key if isinstance(key, tuple) else (key,)))
        groups: dict[str, list[str]] = {}
        for mode, m in g.groupby("quality_mode", sort=False):
            loses = tree_loses_from(m)
            m = m.sort_values("batch_size")
            first = m.iloc[0]
            if loses is None:
                text = f"the tree still wins at batch {int(m.batch_size.max())}"
            elif loses > m.batch_size.min():
                text = (f"from batch {loses} on a chain (or plain decoding) is at least as good "
                        "as every tree")
            else:
                text = "no tree beats the best chain at any batch size"
            groups.setdefault(text, []).append(
                f"{mode} (best at batch {int(first.batch_size)}: "
                f"{shape_label(first.tree)}, {first.tree.speedup:.2f}x)")
        parts = [f"{text} in {', '.join(modes)}" for text, modes in groups.items()]
        lines.append(f"- {where}: " + "; ".join(parts) + ".")
    return "\n".join(lines)
