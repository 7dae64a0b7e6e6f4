"""Refresh the generated blocks of README.md and design.md from results/ (run after python run.py),
and the Validation section: its `validation` block from the data in the repository; its
`validation-shared` block and plots/validation_step_time.png from those and the data beside the
project (../shared/calibration), left as they are, and named as skipped, where those are absent.

    python scripts/update_docs.py

Prints one line per output: `updated` only where the file changed, `unchanged`, or `skipped`
with the reason. tests/test_docs.py fails when the blocks and the committed results disagree.
"""
import os
import sys

import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from src.disagg import silicon_report as disagg_silicon  # noqa: E402
from src.doc_blocks import readme_hardware_headline, readme_headline, replace_block, seed_comparison  # noqa: E402
from src.hardware import moe_validation, published_checks, validation  # noqa: E402
from src.kernels import refit_file  # noqa: E402
from src.online import blog_check  # noqa: E402
from src.reporting import write_atomic  # noqa: E402
from src.trees import report as tree_report  # noqa: E402
from src.trees import validation as tree_validation  # noqa: E402
from src.validation import silicon  # noqa: E402

TREE_RESULTS = os.path.join("studies", "trees", "results", "results.csv")  # the tree study


def blocks(root: str = ROOT, sets: list | None = None, blog: dict | None = None,
           cal_dir=validation.CALIBRATION_DIR) -> dict:
    """Generated blocks by (file, block name). The `validation` block comes from the data in the
    repository; `validation-shared` needs the data beside the project (cal_dir,
    ../shared/calibration) and is left out without them (skipped() names it); `sets`: the
    Validation data sets and `blog` (published_checks.vllm_blog()), when the caller has them."""
    everything = pd.read_csv(os.path.join(root, "results", "results.csv"))
    df = everything[everything.scenario == "reference"]
    hw = everything[everything.scenario != "reference"]
    comparison = pd.read_csv(os.path.join(root, "results", "verification_comparison.csv"))
    blog = published_checks.vllm_blog() if blog is None else blog
    sets = validation.data_sets(cal_dir, vllm_result=blog) if sets is None else sets
    out = {("README.md", "headline"): readme_headline(df, comparison),
           ("design.md", "seed-comparison"): seed_comparison(df),
           ("README.md", "hardware-headline"): readme_hardware_headline(hw),
           ("design.md", "published-checks"): published_checks.markdown(
               published_checks.magicdec(), blog, published_checks.vllm_v1_eagle3()),
           ("design.md", "blog-check"): blog_check.markdown(
               pd.read_csv(os.path.join(root, "results", "serving_vllm_blog_check.csv"))),
           ("design.md", "moe-validation"): moe_validation.markdown(
               pd.read_csv(os.path.join(root, "results", "moe_validation.csv"))),
           ("design.md", "validation"): validation.block(sets=sets),
           ("design.md", "tree-validation"): tree_validation.table(),
           ("design.md", "kernel-efficiency"): refit_file.markdown()}
    trees = os.path.join(root, TREE_RESULTS)
    if os.path.exists(trees):  # a copy of the docs without the tree study keeps its block
        out[("README.md", "tree-headline")] = tree_report.readme_headline(pd.read_csv(trees))
    silicon_csv = os.path.join(root, "results", "silicon_validation.csv")
    if os.path.exists(silicon_csv):  # python run.py silicon-validate writes it
        out[("design.md", "silicon-validation")] = silicon.markdown(pd.read_csv(silicon_csv))
    disagg_csv = os.path.join(root, "results", "silicon_disagg_validation.csv")
    if os.path.exists(disagg_csv):  # python run.py silicon-validate-disagg writes it
        out[("design.md", "silicon-disagg-validation")] = disagg_silicon.markdown(
            pd.read_csv(disagg_csv))
    if validation.available(cal_dir):
        out[("design.md", "validation-shared")] = validation.shared_block(sets, cal_dir)
    return out


def skipped(cal_dir=validation.CALIBRATION_DIR) -> list[str]:
    """What main() leaves as it is, and why: the outputs drawn from the data beside the project
    where they are absent."""
    if validation.available(cal_dir):
        return []
    why = f"needs the data beside the project, {cal_dir} (absent)"
    return [f"design.md (validation-shared): {why}", f"{validation.PLOT_PATH}: {why}"]


def _write_if_changed(path: str, data: bytes) -> bool:
    """Write `data` to `path` unless it holds them already; whether it wrote."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except FileNotFoundError:
        pass
    write_atomic(path, data)
    return True


def main(root: str = ROOT, cal_dir=validation.CALIBRATION_DIR, blog: dict | None = None) -> int:
    """Refresh every block and the plot; one line each: updated (the file changed), unchanged,
    or skipped (with the reason)."""
    blog = published_checks.vllm_blog() if blog is None else blog
    sets = validation.data_sets(cal_dir, vllm_result=blog)
    if validation.available(cal_dir):
        changed = _write_if_changed(os.path.join(root, validation.PLOT_PATH),
                                    validation.plot_bytes(sets))
        print(f"{'updated' if changed else 'unchanged'} {validation.PLOT_PATH}")
    for (name, block), body in blocks(root, sets=sets, blog=blog, cal_dir=cal_dir).items():
        path = os.path.join(root, name)
        with open(path) as f:
            text = f.read()
        changed = _write_if_changed(path, replace_block(text, block, body).encode())
        print(f"{'updated' if changed else 'unchanged'} {name} ({block})")
    for line in skipped(cal_dir):
        print(f"skipped {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
