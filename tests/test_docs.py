"""The README's and design.md's generated blocks equal what the committed results give."""
import importlib.util
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def update_docs():
    spec = importlib.util.spec_from_file_location("update_docs",
                                                  os.path.join(ROOT, "scripts", "update_docs.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def blog(update_docs):
    return update_docs.published_checks.vllm_blog()  # simulated once for the file's tests


def test_generated_blocks_are_up_to_date(update_docs, blog):
    # on a fresh clone (no ../shared) every block but `validation-shared` is checked
    found = update_docs.blocks(ROOT, blog=blog)
    assert ("design.md", "validation") in found
    for (name, block), body in found.items():
        with open(os.path.join(ROOT, name)) as f:
            text = f.read()
        start, end = f"<!-- {block}:start -->", f"<!-- {block}:end -->"
        assert text[text.index(start) + len(start):text.index(end)].strip() == body.strip(), \
            f"{name} block {block} is stale: run python scripts/update_docs.py"


def _copy_of_the_docs(tmp_path):
    for name in ("README.md", "design.md"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    shutil.copytree(os.path.join(ROOT, "results"), tmp_path / "results")
    (tmp_path / "plots").mkdir()
    return tmp_path


def test_update_docs_says_updated_only_for_a_changed_file_and_names_what_it_skipped(
        update_docs, blog, tmp_path, capsys, monkeypatch):
    root = _copy_of_the_docs(tmp_path)
    # blocks() reads root's results/ and the repository's data, none of which this test changes
    # (it changes design.md, which blocks() does not read): main's second run takes the first's
    computed, real_blocks = {}, update_docs.blocks

    def blocks_once(root, **kw):
        key = (str(root), str(kw.get("cal_dir")))
        if key not in computed:
            computed[key] = real_blocks(root, **kw)
        return computed[key]

    monkeypatch.setattr(update_docs, "blocks", blocks_once)
    absent = tmp_path / "no-shared"
    before = {n: (root / n).read_bytes() for n in ("README.md", "design.md")}
    assert update_docs.main(str(root), absent, blog) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if line.startswith("updated")], lines
    assert "unchanged design.md (validation)" in lines
    skipped = [line for line in lines if line.startswith("skipped")]
    assert len(skipped) == 2 and all(str(absent) in line for line in skipped)
    assert any("validation-shared" in line for line in skipped)
    assert any("plots/validation_step_time.png" in line for line in skipped)
    assert {n: (root / n).read_bytes() for n in before} == before  # nothing rewritten
    assert not (root / "plots" / "validation_step_time.png").exists()
    # a stale block: exactly that file is updated, and the block is back
    stale = before["design.md"].replace(b"| H200 fit session (repository) step times",
                                        b"| stale", 1)
    assert stale != before["design.md"]
    (root / "design.md").write_bytes(stale)
    assert update_docs.main(str(root), absent, blog) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if line.startswith("updated")] == [
        "updated design.md (validation)"]
    assert (root / "design.md").read_bytes() == before["design.md"]


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


def test_readme_moe_layers_paragraph_sits_in_the_moe_section():
    """It was glued inside the quickstart's timing paragraph (issue 26)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    i = readme.index("**MoE layers.**")
    section = readme.rfind("\n## ", 0, i)
    assert readme[section:].startswith("\n## Mixture-of-Experts targets")
    assert readme[i - 2:i] == "\n\n"  # a paragraph of its own


def test_readme_outputs_say_gamma_is_n_minus_1_for_trees():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    outputs = readme[readme.index("### Outputs"):readme.index("### Your measured acceptance")]
    row = next(line for line in outputs.splitlines() if line.startswith("| `results/results.csv`"))
    assert "N - 1" in row and "`tree_tokens`" in row
