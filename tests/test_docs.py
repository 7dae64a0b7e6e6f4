"""The README's and design.md's generated blocks equal what the committed results give."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_generated_blocks_are_up_to_date():
    spec = importlib.util.spec_from_file_location("update_docs",
                                                  os.path.join(ROOT, "scripts", "update_docs.py"))
    update_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(update_docs)
    for (name, block), body in update_docs.blocks(ROOT).items():
        with open(os.path.join(ROOT, name)) as f:
            text = f.read()
        start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
        assert text[text.index(start) + len(start):text.index(end)].strip() == body.strip(), \
            f"{name} block {block} is stale: run python scripts/update_docs.py"


def test_readme_quickstart_commands_are_the_ones_ci_runs():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    assert "pip install -r requirements.txt && python run.py" in readme
    assert "python -m pytest -q" in readme and "python -m pytest -q" in ci
    assert "ruff check ." in readme and "ruff check ." in ci


def _layout_paths() -> list[str]:
    """Paths of design.md's layout tree (indentation nests them under the folder above)."""
    with open(os.path.join(ROOT, "design.md")) as f:
        text = f.read()
    block = text[text.index("## Layout"):]
    block = block[block.index("```") + 3:]
    block = block[:block.index("```")]
    paths, parents = [], []
    for line in block.strip("\n").splitlines():
        depth = (len(line) - len(line.lstrip())) // 2
        name = line.split()[0]
        parents = parents[:depth] + [name]
        paths.append("".join(parents))
    return paths


def test_design_layout_names_every_module_and_only_existing_ones():
    paths = _layout_paths()
    for path in paths:
        assert os.path.exists(os.path.join(ROOT, path)), f"design.md layout: {path} does not exist"
    src = os.path.join(ROOT, "src")
    for entry in sorted(os.listdir(src)):
        if entry.endswith(".py") and entry != "__init__.py" or (
                os.path.isdir(os.path.join(src, entry)) and not entry.startswith((".", "__"))):
            name = f"src/{entry}" + ("/" if os.path.isdir(os.path.join(src, entry)) else "")
            assert name in paths, f"design.md layout does not list {name}"
