"""TensorRT-LLM's answer in `recommend --engine trtllm`: a trtllm-serve command and its YAML.

The YAML is the `--extra_llm_api_options` file (trtllm-serve's option; `--config` is its alias on
main) with a `speculative_config` whose keys are those of TensorRT-LLM's own config classes, read
in tensorrt_llm/llmapi/llm_args.py at NVIDIA/TensorRT-LLM commit 0004396720054fd8 (main, 2026):

  decoding_type       the discriminator: "Eagle3" (Eagle3DecodingConfig), "MTP"
                      (MTPDecodingConfig), "NGram" (NGramDecodingConfig), "Draft_Target"
                      (DraftTargetDecodingConfig); the PyTorch backend takes no EAGLE-1/2 head
                      (docs/source/features/speculative-decoding.md: "supports only Eagle3")
  max_draft_len       drafts per step (> 0 for Eagle3, NGram and Draft_Target)
  speculative_model   the EAGLE-3 head or draft model (required by Eagle3 and Draft_Target)
  draft_len_schedule  {batch size: draft length}; tensorrt_llm/_torch/speculative/utils.py
                      get_draft_len_for_batch_size: a batch of B sequences takes the value of the
                      first key >= B, above the largest key the draft length is 0 (speculation
                      off). DecodingBaseConfig's validator: keys >= 1, values >= 0, the value at
                      the smallest key == max_draft_len, every value <= max_draft_len.
  max_concurrency     speculation off above this batch size; mutually exclusive with
                      draft_len_schedule (the validator refuses both)

The project's schedule ([low, high, K] ranges from batch 1 up, src/online/policies.py) maps to
{high: K} per range: a range's top batch is its key, so B in [low, high] finds it first. A gamma
that rises above batch 1's is capped at it (the validator allows no value above max_draft_len,
which must be batch 1's), trailing off-ranges fall to the implicit 0 above the last key, and a
single on-range followed by off is printed as max_concurrency. design.md, "The trtllm profile".
"""
from __future__ import annotations

from src.config import ConfigError

# the TensorRT-LLM source the snippet's keys and rules were read from
TRTLLM_SOURCE = "NVIDIA/TensorRT-LLM main at commit 0004396 (tensorrt_llm/llmapi/llm_args.py)"
# draft kind (src/hardware/moe_report.draft_kind, plus ngram) -> decoding_type (llm_args.py)
DECODING_TYPE = {"eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram", "model": "Draft_Target"}


def draft_kind(draft: str) -> str:
    """The kind of a --draft value: ngram, or src/hardware/moe_report.draft_kind's."""
    if draft == "ngram":
        return draft
    from src.costmodel import load_presets
    from src.hardware.moe_report import draft_kind as kind_of
    return kind_of(draft, load_presets().models)


def check_draft(draft: str) -> str:
    """The kind of --draft `draft`; a draft TensorRT-LLM's PyTorch backend cannot run is refused
    naming --draft (one line, exit 2)."""
    kind = draft_kind(draft)
    if kind not in DECODING_TYPE:
        raise ConfigError("--draft", f"TensorRT-LLM's PyTorch backend has no '{kind}' drafting "
                                     "(it takes EAGLE-3 heads only, not EAGLE-1/2: docs/source/"
                                     "features/speculative-decoding.md); allowed with --engine "
                                     "trtllm: an EAGLE-3 head preset or eagle3, mtp, ngram or a "
                                     "draft model preset")
    return kind


def draft_len_schedule(ranges) -> tuple[int, dict[int, int], bool]:
    """(max_draft_len, {batch key: draft length}, capped) of the project's [low, high, K] ranges,
    read back by get_draft_len_for_batch_size as the project's gamma (capped at batch 1's)."""
    ranges = sorted(tuple(int(v) for v in r) for r in ranges)
    top = ranges[0][2]
    if top <= 0:
        raise ValueError("no draft length at batch 1: nothing to speculate")
    out: dict[int, int] = {}
    capped = False
    for _, high, k in ranges:
        capped = capped or k > top
        k = min(k, top)
        if out and list(out.values())[-1] == k:
            del out[max(out)]  # the same length as the previous range: one key, the higher
        out[high] = k
    while out and out[max(out)] == 0:
        del out[max(out)]  # the implicit 0 above the largest key says it
    return top, out, capped


def lookup(schedule: dict[int, int], batch: int, max_draft_len: int) -> int:
    """TensorRT-LLM's get_draft_len_for_batch_size (utils.py above): the first key >= batch."""
    if not schedule:
        return max_draft_len
    for key in sorted(schedule):
        if key >= batch:
            return schedule[key]
    return 0


def speculative_config(draft: str, ranges, draft_path: str | None) -> tuple[dict, bool]:
    """(the speculative_config mapping, whether a rising gamma was capped) for --draft `draft`
    (a draft model preset is named by its Hugging Face id unless `draft_path` is given)."""
    kind = check_draft(draft)
    if kind == "model" and not draft_path:
        from src.costmodel import load_presets
        draft_path = load_presets().models[draft].hf_name
    top, schedule, capped = draft_len_schedule(ranges)
    out: dict = {"decoding_type": DECODING_TYPE[kind], "max_draft_len": top}
    if kind in ("eagle3", "model"):
        out["speculative_model"] = draft_path
    values = list(schedule.values())
    last = max(r[1] for r in ranges)
    if values == [top] and max(schedule) >= last:
        pass  # the same draft length at every batch: max_draft_len says it
    elif values == [top]:
        out["max_concurrency"] = max(schedule)  # one on-range, then off
    else:
        out["draft_len_schedule"] = schedule
    return out, capped


def _scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    text = str(v)
    return text if text.replace("/", "").replace("-", "").replace(".", "").replace("_", "") \
        .isalnum() else '"' + text.replace('"', '\\"') + '"'


def to_yaml(data: dict, indent: int = 0) -> list[str]:
    """Block-style YAML of nested mappings of ints, bools and strings (what the snippet holds)."""
    lines = []
    for key, value in data.items():
        pad = " " * indent
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines += to_yaml(value, indent + 2)
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return lines


def extra_options(draft: str, ranges, draft_path: str | None) -> tuple[dict, bool]:
    """The whole --extra_llm_api_options mapping: speculative_config, and CUDA-graph padding so
    every batch up to the graph limit (128 by default) replays a graph, as the profile assumes
    (BaseCudaGraphConfig.enable_padding, default false: only the listed batch sizes would)."""
    spec, capped = speculative_config(draft, ranges, draft_path)
    return {"speculative_config": spec, "cuda_graph_config": {"enable_padding": True}}, capped


def trtllm_lines(draft: str, ranges, draft_path: str | None, model: str, tp: int,
                 max_batch: int) -> list[str]:
    """The printed TensorRT-LLM block of recommend for --draft `draft`."""
    kind = draft_kind(draft)
    options, capped = extra_options(draft, ranges, draft_path)
    spec = options["speculative_config"]
    lines = [f"TensorRT-LLM (PyTorch backend; keys and rules of {TRTLLM_SOURCE}; "
             "draft_len_schedule: a batch of B sequences drafts the value of the first key >= B, "
             "none above the last key):",
             "  cat > spec.yaml <<'EOF'"]
    lines += ["  " + line for line in to_yaml(options)]
    lines += ["  EOF",
              f"  trtllm-serve {model} --backend pytorch --tp_size {tp} --max_batch_size "
              f"{max_batch} --extra_llm_api_options spec.yaml"]
    if capped:
        lines.append(f"  (the schedule's gamma rises above batch 1's; TensorRT-LLM allows no "
                     f"draft length above max_draft_len, which must be batch 1's: capped at "
                     f"{spec['max_draft_len']})")
    if kind == "mtp":
        lines.append("  (MTP with one MTP layer in the checkpoint (num_nextn_predict_layers 1) "
                     "runs as MTP-Eagle, that layer reused max_draft_len times; acceptance past "
                     "the first position must come from measurement)")
    if kind != "ngram" and ("max_concurrency" in spec or "draft_len_schedule" in spec):
        lines.append("  (newer TensorRT-LLM main floors a scheduled 0 to 1 draft for one-model "
                     "drafting: above the last key it may still draft one token)")
    return lines
