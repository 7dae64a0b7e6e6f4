"""Token trees in the simulator: their step costs and their steps, below the sweep that runs them.

costs.py (tree step times on the hardware cost model), serve.py (simulating and pricing a tree
grid point), loop.py (the compiled step loop for trees: src/step_engine.py's, given the tree),
grid.py (a tree grid point's replication block, which src/sweep.py calls), serving.py (a tree
policy's accepted depths and step prices in the serving engine, src/online/). The model they
simulate is src/treeshape/; the study's summary, plot and advice on top are src/trees/.
"""
