"""Bad inputs of the hardware cost model (src/costmodel/): one line naming the field, listing what
is allowed (moved out of test_costmodel.py, which passed 600 lines)."""
from __future__ import annotations

import numpy as np
import pytest

from src.costmodel import (
    CostModelInputError,
    HardwareCostModel,
    forward_pass_breakdown,
    load_presets,
)


@pytest.fixture(scope="module")
def presets():
    return load_presets()

# ---------------------------------------------------------------- bad inputs
def _build(*a, **kw):
    return HardwareCostModel.from_presets(*a, engine="ideal", **kw)


def _raises(match, fn, *a, **kw):
    with pytest.raises(CostModelInputError, match=match) as info:
        fn(*a, **kw)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_unknown_names_list_the_known_ones(presets):
    msg = _raises(r"^gpu: unknown GPU 'x100'; known: ", _build, "x100",
                  "llama-3.1-8b")
    assert "h100-sxm" in msg and "mi300x" in msg
    msg = _raises(r"^target: unknown model 'gpt-5'; known: ", _build,
                  "h100-sxm", "gpt-5")
    assert "llama-3.1-8b" in msg
    _raises(r"^draft: unknown model", _build, "h100-sxm", "llama-3.1-8b",
            draft="nope")


def test_tp_must_divide_heads(presets):
    msg = _raises(r"^tp: 3 does not divide", _build, "h100-sxm",
                  "llama-3.1-8b", tp=3)
    # a multiple of the 8 KV heads replicates them (one per GPU), as vLLM and SGLang do
    assert "allowed: 1, 2, 4, 8, 16, 32" in msg
    _raises(r"^tp: 12 does not divide", _build, "h100-sxm",
            "llama-3.1-8b", tp=12)
    _raises(r"^tp: must be an integer >= 1", _build, "h100-sxm",
            "llama-3.1-8b", tp=0)
    _raises(r"^draft_tp: 4 does not divide", _build, "h100-sxm",
            "llama-3.1-8b", draft="qwen2.5-0.5b", draft_tp=4)


def test_non_positive_sizes(presets):
    gpu, model, p = presets.gpu("h100-sxm"), presets.model("llama-3.1-8b"), presets.params
    _raises(r"^batch: must be an integer >= 1", forward_pass_breakdown, gpu, model, 1, 0, 1, 0, p)
    _raises(r"^positions: must be an integer >= 1", forward_pass_breakdown, gpu, model, 1, 1, 0,
            0, p)
    _raises(r"^context: must be an integer >= 0", forward_pass_breakdown, gpu, model, 1, 1, 1,
            -5, p)


def test_does_not_fit_raises(presets):
    gpu, p = presets.gpu("h100-sxm"), presets.params
    # weights alone too large: the fix is the tensor-parallel degree, so the error names tp
    msg = _raises(r"^tp: llama-3.1-70b at tp=1 has 141.1 GB of weights", forward_pass_breakdown,
                  gpu,
                  presets.model("llama-3.1-70b"), 1, 1, 1, 0, p)
    assert "allowed: tp >= 2, the smallest whose weights fit (70.6 GB per GPU)" in msg
    _raises(r"^batch/context: ", forward_pass_breakdown, gpu, presets.model("llama-3.1-8b"), 1,
            512, 1, 8192, p)  # 512 x 8k tokens x 128 KiB = 550 GB of KV cache
    forward_pass_breakdown(gpu, presets.model("llama-3.1-70b"), 4, 8, 1, 8192, p)  # fits
    _raises(r"^tp: .*with draft", _build, "l4",
            "llama-3.1-8b", draft="llama-3.2-3b")
    m = HardwareCostModel.from_presets("h100-sxm", "llama-3.1-8b", engine="ideal",
                                       draft="llama-3.2-1b")
    with pytest.raises(CostModelInputError, match="batch/context"):
        m.target_pass_time(np.ones((1, 256), bool), 1, np.full((1, 256), 4096))


def test_bad_preset_files(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[gpus."g"]\nname = "G"\ndense_bf16_tflops = 10.0\n')
    _raises(r"^gpus\.g: missing field\(s\) memory_bandwidth_gb_per_s", load_presets, [bad])
    bad.write_text('[gpus."h100-sxm"]\nmemroy_gb = 10.0\n')
    _raises(r"^gpus\.h100-sxm: unknown field\(s\) memroy_gb; allowed: ", load_presets, [bad])
    bad.write_text('[gpus."h100-sxm"]\nmemory_gb = -1.0\n')
    _raises(r"^gpus\.h100-sxm\.memory_gb: must be > 0", load_presets, [bad])
    bad.write_text('[models."llama-3.1-8b"]\nn_layers = "many"\n')
    _raises(r"^models\.llama-3.1-8b\.n_layers: expected an integer", load_presets, [bad])
    bad.write_text("[gpu]\nx = 1\n")
    _raises(r"^presets: .* unknown table\(s\) gpu; allowed: ", load_presets, [bad])
    _raises(r"^presets: file not found", load_presets, [tmp_path / "missing.toml"])
