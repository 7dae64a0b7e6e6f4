"""Token trees: draft shapes beyond a chain (SGLang's EAGLE trees, Sequoia's optimal trees).

The study's part: report.py and plots.py (summary section and plot), outputs.py (their files),
validation.py (tree step times against published ones), recommend.py (the tree advice of
`recommend`). They stand above src/sweep.py; the model is src/treeshape/, the simulation
src/treesim/. design.md, "Token trees", gives the model and its sources.
"""
