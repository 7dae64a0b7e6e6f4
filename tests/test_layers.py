"""The house's floors: no file of src/ imports itself back through others (no import loop), and
no package of src/ does either (each layer imports only the ones below it).

Every src/**/*.py is parsed with ast (nothing is imported or run); an import of a src module,
at module level or inside a function, is an arrow. A function-level import that closes a loop is
a loop too: hiding it in a function does not untie it. A layer is a file directly under src/ or a
folder of src/ as a whole (src/trees/, src/online/, ...): a folder A whose files import a folder B
whose files import A is a loop between layers even where no file imports itself back, and then
neither stands above the other.
"""
import ast
import pathlib

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"


def _module(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the src modules it imports (`from src.a import b` names src.a.b when that is a
    module, else src.a)."""
    paths = {_module(p): p for p in SRC.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        out = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = {f"{node.module}.{a.name}" for a in node.names} & paths.keys()
                out |= subs or ({node.module} & paths.keys())
        graph[name] = out - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_sees_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_loop_in_src():
    assert cycles(import_graph()) == []


def layer(module: str) -> str:
    """The layer of a src module: src.online.cli -> src.online, src.config -> src.config."""
    return ".".join(module.split(".")[:2])


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """layer -> the other layers its modules import."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        out.setdefault(layer(module), set()).update(layer(t) for t in targets)
    return {name: targets - {name} for name, targets in out.items()}


def test_layer_graph_sees_a_loop_between_folders():
    files = {"src.a.low": {"src.b.x"}, "src.b.x": {"src.a.high"}, "src.a.high": set(),
             "src.c": {"src.a.low"}}
    assert cycles(files) == []  # no file imports itself back ...
    assert cycles(layer_graph(files)) == [["src.a", "src.b"]]  # ... but src/a/ and src/b/ do


def test_no_import_loop_between_the_layers_of_src():
    graph = import_graph()
    loops = cycles(layer_graph(graph))
    ties = [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
            for loop in loops if layer(a) in loop and layer(b) in loop and layer(a) != layer(b)]
    assert loops == [], "layers that import each other: " + "; ".join(ties)
