"""Token trees, the model alone: shapes and what a tree accepts (no engine, no cost, no study).

shape.py (the (steps, topk, tokens) triple and its rules), siblings.py (the sibling acceptance
vector), tree.py (a tree's child table and expected tokens), select.py (which nodes SGLang's
beam-plus-rerank verifies), sequoia.py (Sequoia's dynamic-programming optimal tree), depth.py
(the accepted depth's survival), fit.py (a measured tree acceptance length -> the chain rate),
accept.py (closed form and the per-step draw of a tree, compiled into src/step_engine.py's loop),
config_rules.py (the study options' tree rules, read by src/config.py). Nothing here imports the
rest of the project but src/errors.py, so src/config.py and src/step_engine.py stand above it.
design.md, "Token trees", gives the model and its sources.
"""
