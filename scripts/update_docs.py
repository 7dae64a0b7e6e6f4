"""Refresh the generated blocks of README.md and design.md from results/ (run after python run.py),
and the Validation section with plots/validation_step_time.png from the calibration data.

    python scripts/update_docs.py

tests/test_docs.py fails when the blocks and the committed results disagree.
"""
import os
import sys

import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from src.calibration import validation  # noqa: E402
from src.doc_blocks import readme_hardware_headline, readme_headline, replace_block, seed_comparison  # noqa: E402
from src.hardware import published_checks  # noqa: E402
from src.online import blog_check  # noqa: E402
from src.reporting import write_atomic  # noqa: E402


def blocks(root: str = ROOT, sets: list | None = None, blog: dict | None = None) -> dict:
    """Generated blocks by (file, block name). The Validation block needs the calibration data
    beside the project (../shared/calibration) and is left out without them; `sets`: its data
    sets and `blog` (published_checks.vllm_blog()), when the caller has them already."""
    everything = pd.read_csv(os.path.join(root, "results", "results.csv"))
    df = everything[everything.scenario == "reference"]
    hw = everything[everything.scenario != "reference"]
    comparison = pd.read_csv(os.path.join(root, "results", "verification_comparison.csv"))
    blog = published_checks.vllm_blog() if blog is None else blog
    out = {("README.md", "headline"): readme_headline(df, comparison),
           ("design.md", "seed-comparison"): seed_comparison(df),
           ("README.md", "hardware-headline"): readme_hardware_headline(hw),
           ("design.md", "published-checks"): published_checks.markdown(
               published_checks.magicdec(), blog, published_checks.vllm_v1_eagle3()),
           ("design.md", "blog-check"): blog_check.markdown(
               pd.read_csv(os.path.join(root, "results", "serving_vllm_blog_check.csv")))}
    if validation.available():
        sets = validation.data_sets(vllm_result=blog) if sets is None else sets
        out[("design.md", "validation")] = validation.block(sets=sets)
    return out


def main() -> int:
    sets, blog = None, published_checks.vllm_blog()
    if validation.available():
        sets = validation.data_sets(vllm_result=blog)
        write_atomic(os.path.join(ROOT, validation.PLOT_PATH), validation.plot_bytes(sets))
        print(f"updated {validation.PLOT_PATH}")
    for (name, block), body in blocks(sets=sets, blog=blog).items():
        path = os.path.join(ROOT, name)
        with open(path) as f:
            text = f.read()
        write_atomic(path, replace_block(text, block, body).encode())
        print(f"updated {name} ({block})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
