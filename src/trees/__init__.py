"""Token trees: draft shapes beyond a chain (SGLang's EAGLE trees, Sequoia's optimal trees).

shape.py (the (steps, topk, tokens) triple and its rules), siblings.py (the sibling acceptance
vector), select.py (which nodes SGLang's beam-plus-rerank verifies), sequoia.py (Sequoia's
dynamic-programming optimal tree), accept.py (closed form and the per-step draw of a tree),
loop.py (the compiled step loop for trees), serve.py (simulating and pricing a tree grid point),
costs.py (tree step times on the hardware cost model), report.py and plots.py (summary section
and plot). design.md, "Token trees", gives the model and its sources.
"""
