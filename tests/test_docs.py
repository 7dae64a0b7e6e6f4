"""The README's and design.md's generated blocks equal what the committed results give."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_generated_blocks_are_up_to_date():
    spec = importlib.util.spec_from_file_location("update_docs", os.path.join(ROOT, "scripts", "update_docs.py"))
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
