"""How good the hardware cost model is: predicted vs measured on every data set it was fitted to
or checked on, as design.md's "Validation" tables and plots/validation_step_time.png.

    python -m src.hardware.validation          # print the markdown tables

Data sets in the repository (design.md's `validation` block; a fresh clone regenerates it):

* The project's own H200 measurements (measurements/h200-2026-11-29, `python run.py measure`):
  graph forward rows with `pytorch-graphs` (the faster kernel per configuration), attention_only
  rows (each kernel), eager rows with `pytorch-eager`; the presets shipped in
  src/presets/h200_calibration.toml are fitted to them (src/calibration/shipped.py). Their
  prefill rows: checked, never fitted.
* Published step times: MagicDec Table 1 (T_AR, T_V, gamma x T_D, `ideal` engine) and vLLM
  issue #20780 (vLLM V1 EAGLE-3 time per output token, `vllm-v1` without CPU overlap): checked.
* Published speedups (the vLLM blog; src/hardware/published_checks.py): checked; summarised here,
  tabulated in "Published checks".

Data sets beside the project (read, never copied, from ../shared/calibration, whose README asks
that they stay out of the repository; design.md's `validation-shared` block, regenerated only
where they are present; a missing file leaves its data set out):

* Another H200 session (h200/h200_step_times_ms.csv, h200_prefill_times_ms.csv): another H200,
  another host; checked, never fitted: the independent check of the H200 calibration.
* vidur's non-attention forward times (A100, H100): fitted by scripts/fit_costmodel.py.
* vidur's all-reduce times: H100 DGX fitted per GPU count; A100 DGX checked against the generic
  model it uses (design.md: vidur's A100 rows are 4-5x below published nccl-tests runs).
* vidur's A100 CPU overheads: fitted into the vllm-2024 profile's per-step and draft-pass CPU.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from src.calibration.fit import best_of_kernels, predict
from src.calibration.measurements import read_measurements
from src.calibration.shipped import FIT_MEASUREMENTS
from src.costmodel import (
    load_engine_profiles,
    load_presets,
    non_attention_forward_ms,
)
from src.costmodel.allreduce import allreduce_cost

REPO = Path(__file__).resolve().parents[2]
CALIBRATION_DIR = REPO.parent / "shared" / "calibration"
# the H200 session the calibration is fitted to (in the repository) and the one that checks it
FIT_LABEL = "H200 fit session (repository)"
FIT_SOURCE = "H200, session in the repository (fitted to)"
CHECK_LABEL = "H200 2nd session (../shared)"
CHECK_SOURCE = "H200, 2nd session in ../shared (checked)"
PLOT_PATH = "plots/validation_step_time.png"
BAND = 0.20  # the plot's +-20% band
VIDUR_GPUS = {"a100": "a100-80gb-sxm", "h100": "h100-sxm"}
VIDUR_MODELS = {"Llama-2-7b-hf": "llama-2-7b", "Meta-Llama-3-8B": "llama-3-8b"}
VIDUR_SYSTEMS = {"a100_dgx": "a100-80gb-sxm", "h100_dgx": "h100-sxm"}
# what kind of pass a value times (the plot's markers)
DECODE = "decode step (1 token per sequence)"
VERIFY = "verification step (2+ tokens per sequence)"
PREFILL = "prefill"
ATTENTION = "attention kernels alone"
DRAFT = "draft passes (gamma x T_D)"
PER_TOKEN = "time per output token"
LAYERS = "decoder layers without attention"


@dataclass(frozen=True)
class DataSet:
    """One group of predicted-vs-measured values."""

    name: str  # e.g. "H200 step times, graph forward"
    gpu: str  # e.g. "H200", "A100 (TP 1-8)"
    model: str  # e.g. "llama-3.1-8b"
    role: str  # "fitted" or "checked"
    quantity: str  # what is compared, e.g. "step time, ms"
    measured: np.ndarray
    predicted: np.ndarray
    labels: tuple[str, ...]  # one per value: where it is (batch, positions, ...)
    step_time: bool = True  # plotted in validation_step_time.png
    source: str = ""  # who measured it on what (the plot's colour), e.g. "H200, 2nd session"
    kinds: tuple[str, ...] = ()  # one per value: what kind of pass it is (the plot's marker)
    shared: bool = False  # read from ../shared/calibration (not in the repository)

    @property
    def errors(self) -> np.ndarray:
        return self.predicted / self.measured - 1


def _h200_sets(cal_dir: Path) -> list[DataSet]:
    """The H200 session beside the project: the independent check of the H200 calibration."""
    sets = _measured_sets(cal_dir / "h200" / "h200_step_times_ms.csv",
                          cal_dir / "h200" / "h200_prefill_times_ms.csv", "h200", CHECK_LABEL,
                          "H200", "checked", CHECK_SOURCE)
    return [replace(s, shared=True) for s in sets]


def _fit_sets() -> list[DataSet]:
    """The repository's H200 measurements, which the shipped H200 calibration is fitted to."""
    steps, prefill = (REPO / p for p in FIT_MEASUREMENTS)
    return _measured_sets(steps, prefill, "h200", FIT_LABEL, "H200", "fitted", FIT_SOURCE)


def _measured_sets(steps: Path, prefill: Path, gpu_id: str, label: str, gpu_label: str,
                   role: str, source: str) -> list[DataSet]:
    """Data sets of measurement files in the project's format: graph forward (faster kernel),
    attention_only and eager rows of `steps` with the given role; prefill rows, checked.
    Kinds: prefill rows, attention_only rows, else decode (positions = 1) or verification."""
    if not steps.is_file():
        return []
    presets = load_presets()
    engines = load_engine_profiles()
    graph, eager = engines["pytorch-graphs"], engines["pytorch-eager"]
    gpu, models, params = presets.gpu(gpu_id), presets.models, presets.params
    rows = read_measurements(str(steps), models)

    def pred(sub, kernel=None):
        return predict(sub, gpu, models, params, presets.attention, graph, eager, kernel)

    def where(r):
        return f"B={r.batch} t={r.positions} ctx={r.context}"

    out = []
    parts = [(f"{label} step times, graph forward (pytorch-graphs, faster kernel)", "graph",
              "forward", role, True),
             (f"{label} step times, attention_only (each kernel)", "graph", "attention_only",
              role, False),
             (f"{label} step times, eager forward (pytorch-eager)", "eager", "forward", role,
              False)]
    frames = [(name, rows[(rows["mode"] == mode) & (rows["what"] == what)], role, best)
              for name, mode, what, role, best in parts]
    if prefill.is_file():
        frames.append((f"{label} prefill (pytorch-graphs, faster kernel)",
                       read_measurements(str(prefill), models), "checked", True))
    def kind(r):
        if r.what == "prefill":
            return PREFILL
        if r.what == "attention_only":
            return ATTENTION
        return DECODE if r.positions == 1 else VERIFY

    for name, sub, role_, best in frames:
        if sub.empty:
            continue
        frame = best_of_kernels(sub, pred(sub, "best")) if best else sub.assign(
            predicted_ms=pred(sub))
        for model, m in frame.groupby("model", sort=True):
            labels = tuple(where(r) + ("" if best else f" {r.attention_backend}")
                           for r in m.itertuples())
            out.append(DataSet(name, gpu_label, model, role_, "step time, ms",
                               m["median_ms"].to_numpy(), m["predicted_ms"].to_numpy(), labels,
                               source=source, kinds=tuple(kind(r) for r in m.itertuples())))
    return out


def _vidur_sets(cal_dir: Path) -> list[DataSet]:
    out = []
    presets = load_presets()
    path = cal_dir / "vidur_nonattention_forward_ms.csv"
    if path.is_file():
        df = pd.read_csv(path)
        for (g, m), sub in df.groupby(["gpu", "model"], sort=True):
            pred = np.concatenate([
                non_attention_forward_ms(presets.gpu(VIDUR_GPUS[g]),
                                         presets.model(VIDUR_MODELS[m]), int(tp),
                                         s["num_tokens"].to_numpy(float), presets.params)
                for tp, s in sub.groupby("tp", sort=True)])
            sub = sub.sort_values(["tp"], kind="stable")
            labels = tuple(f"TP {r.tp}, {r.num_tokens} tokens" for r in sub.itertuples())
            tps = f"TP {sub['tp'].min()}-{sub['tp'].max()}"
            out.append(DataSet("vidur non-attention forward", f"{g.upper()} ({tps})",
                               VIDUR_MODELS[m], "fitted", "layers without attention, ms",
                               sub["forward_ms_non_attention"].to_numpy(), pred, labels,
                               source=f"{g.upper()}, vidur", kinds=(LAYERS,) * len(labels)))
    path = cal_dir / "vidur_all_reduce_ms.csv"
    if path.is_file():
        df = pd.read_csv(path)
        for system, sub in df.groupby("system", sort=True):
            gpu = presets.gpu(VIDUR_SYSTEMS[system])
            pred = np.concatenate([
                allreduce_cost(gpu, int(n), presets.params, presets.allreduce).time_s(
                    s["size_bytes"].to_numpy(float)) * 1e3
                for n, s in sub.groupby("num_workers", sort=True)])
            sub = sub.sort_values("num_workers", kind="stable")
            # the model does not follow vidur's A100 rows (4-5x below published nccl-tests runs;
            # design.md, "Tensor-parallel all-reduce"): shown, not used
            role = "fitted" if any(f.gpu_id == gpu.gpu_id for f in presets.allreduce) \
                else "not used"
            labels = tuple(f"{r.num_workers} GPUs, {r.size_bytes} bytes"
                           for r in sub.itertuples())
            out.append(DataSet("vidur NCCL all-reduce", system.replace("_", " ").upper(), "-",
                               role, "all-reduce, ms", sub["all_reduce_ms_median"].to_numpy(),
                               pred, labels, step_time=False))
    path = cal_dir / "vidur_a100_cpu_overheads.csv"
    if path.is_file():
        df = pd.read_csv(path)
        # the rows the vllm-2024 profile was fitted to (src/presets/engines.toml)
        rows = df[((df["model_name"] == "meta-llama/Llama-2-7b-hf")
                   & (df["tensor_parallel_degree"] == 1))
                  | ((df["model_name"] == "meta-llama/Llama-2-70b-hf")
                     & (df["tensor_parallel_degree"] == 4))]
        e = load_engine_profiles()["vllm-2024"]
        measured = (rows.schedule_median + rows.sampler_e2e_median + rows.prepare_inputs_e2e_median
                    + rows.model_execution_launch_median + rows.process_model_outputs_median)
        pred = e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * rows["batch_size"]
        labels = tuple(f"{r.model_name.split('/')[-1]} TP {r.tensor_parallel_degree}, "
                       f"batch {r.batch_size}" for r in rows.itertuples())
        out.append(DataSet("vidur CPU per step (vllm-2024)", "A100 host", "llama-2-7b/70b",
                           "fitted", "CPU ms per step", measured.to_numpy(), pred.to_numpy(),
                           labels, step_time=False))
    return [replace(s, shared=True) for s in out]


def _published_sets() -> list[DataSet]:
    from src.hardware import (
        published_checks as pc,  # the study's checks; imported when needed
    )
    from src.hardware.scenario import SCENARIOS_DIR, load_scenario

    scenario = load_scenario(SCENARIOS_DIR / "check-magicdec-table1.toml")
    bd = scenario.cost_model("ideal").step_breakdown(batch=64, gamma=4, context_len_tokens=8000)
    keys = ("T_AR_ms", "T_V_ms", "gamma_T_D_ms")
    predicted = {"T_AR_ms": bd.decode_ms, "T_V_ms": bd.verify_ms, "gamma_T_D_ms": bd.draft_ms}
    out = [DataSet("MagicDec Table 1 (ideal engine)", "H100 x4", "llama-2-7b-32k", "checked",
                   "step time, ms", np.array([pc.MAGICDEC[k] for k in keys]),
                   np.array([predicted[k] for k in keys]),
                   ("T_AR", "T_V", "gamma x T_D"), source="4x H100, MagicDec Table 1",
                   kinds=(DECODE, VERIFY, DRAFT))]
    sync = pc.vllm_v1_eagle3()["sync"]
    ks = list(pc.VLLM_V1_EAGLE3)
    out.append(DataSet("vLLM V1 EAGLE-3, issue #20780 (vllm-v1, CPU not overlapped)", "H100",
                       "llama-3.1-8b", "checked", "time per output token, ms",
                       np.array([pc.VLLM_V1_VANILLA_TPOT_MS]
                                + [pc.VLLM_V1_EAGLE3[k][0] for k in ks]),
                       np.array([sync["vanilla"]] + [sync[k] for k in ks]),
                       ("no speculation", *(f"K={k}" for k in ks)),
                       source="H100, vLLM V1 issue #20780", kinds=(PER_TOKEN,) * (1 + len(ks))))
    return out


def _blog_set(vllm_result: dict) -> list[DataSet]:
    """The vLLM blog's speedups under vllm-2024: the low-load points set alpha and the n-gram
    high-load point set the attention slowdown factor (fitted); the draft model at high load is
    the one check (section 11, "Published checks")."""
    from src.hardware import published_checks as pc

    values = {"fitted": ([], [], []), "checked": ([], [], [])}
    for (name, engine), sp in vllm_result.items():
        if engine != "vllm-2024":
            continue
        low, high = pc.VLLM_BLOG[name]
        check = name.removeprefix("check-vllm-blog-70b-").removesuffix(".toml")
        for role, measured, batch, load in (
                ("fitted", low, pc.LOW_LOAD[0], "low"),
                ("checked" if check == "draft" else "fitted", high, pc.HIGH_LOAD[-1], "high")):
            m, p, lab = values[role]
            m.append(measured)
            p.append(sp[batch])
            lab.append(f"{check}, {load} load (B={batch})")
    return [DataSet(f"vLLM blog speedups (vllm-2024), {role} points", "H100 x4", "llama-3-70b",
                    role, "speedup", np.array(m), np.array(p), tuple(lab), step_time=False)
            for role, (m, p, lab) in values.items() if m]


def data_sets(cal_dir: Path = CALIBRATION_DIR, vllm_result: dict | None = None,
              published: bool = True) -> list[DataSet]:
    """Every data set present (module docstring); vllm_result: published_checks.vllm_blog()'s
    output, to include the blog's speedups without simulating them twice."""
    sets = _fit_sets() + _h200_sets(cal_dir) + _vidur_sets(cal_dir)
    if published:
        sets += _published_sets()
    if vllm_result is not None:
        sets += _blog_set(vllm_result)
    return sets


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def markdown(sets: list[DataSet]) -> str:
    """The Validation table: one row per data set x GPU x model."""
    from src.reporting import md_table

    rows = []
    for s in sets:
        err = s.errors
        worst = int(np.argmax(np.abs(err)))
        rows.append([s.name, s.gpu, s.model, s.role, s.quantity, str(len(err)),
                     f"{100 * np.median(np.abs(err)):.1f}%", _pct(err[worst]),
                     f"{s.labels[worst]}: {s.measured[worst]:.3g} vs {s.predicted[worst]:.3g}",
                     f"{100 * np.mean(np.abs(err) <= BAND):.0f}%"])
    header = ["data set", "GPU", "model", "fitted or checked", "quantity", "values",
              "median abs. error", "worst error", "worst at (measured vs predicted)",
              "within 20%"]
    return md_table(header, rows)


def _session_rates() -> tuple[str, str]:
    """The copy bandwidth and matrix-product rate `measure` recorded in the fitted session
    (environment.json, one entry per run of the session), as text for parameters_markdown."""
    env_path = REPO / Path(FIT_MEASUREMENTS[0]).parent / "environment.json"
    runs = json.loads(env_path.read_text()).values() if env_path.is_file() else []
    copy = [r["copy_tb_s"] for r in runs if "copy_tb_s" in r]
    mm = [r["bf16_matmul_tflops"] for r in runs if "bf16_matmul_tflops" in r]

    def span(v, fmt):
        lo, hi = fmt.format(min(v)), fmt.format(max(v))
        return lo if lo == hi else f"{lo}-{hi}"

    return ((f" (device-to-device copy in the same session: {span(copy, '{:.2f}')} TB/s)"
             if copy else ""),
            (f" (an 8192^3 matrix product in the same session: {span(mm, '{:.0f}')} TFLOP/s)"
             if mm else ""))


def parameters_markdown() -> str:
    """The H200 calibration as shipped: every fitted field with its value, and the rates they
    imply beside the copy bandwidth and matrix-product rate measured in the same run."""
    from src.reporting import md_table

    presets = load_presets()
    gpu = presets.gpu("h200")
    engines = load_engine_profiles()
    fields = ("gemv_bandwidth_efficiency_fraction", "small_gemm_bandwidth_efficiency_fraction",
              "memory_bandwidth_efficiency_fraction", "compute_efficiency_fraction",
              "roofline_sharpness_p", "kernel_fixed_us", "attention_softmax_flops_per_pair")
    rows = [[f"gpus.h200.{f}", f"{getattr(gpu, f):.4g}"] for f in fields]
    rows += [[f"attention.h200.{a.kernel}.compute_efficiency_fraction",
              f"{a.compute_efficiency_fraction:.4g}"] for a in presets.attention
             if a.gpu_id == "h200"]
    rows += [[f"attention.h200.{a.kernel}.memory_bandwidth_efficiency_fraction",
              f"{a.memory_bandwidth_efficiency_fraction:.4g}"] for a in presets.attention
             if a.gpu_id == "h200"]
    g, e = engines["pytorch-graphs"], engines["pytorch-eager"]
    rows += [["engines.pytorch-graphs.verification_extra_kernels_per_layer",
              f"{g.verification_extra_kernels_per_layer:.3g}"],
             ["engines.pytorch-eager.cpu_launch_us_per_kernel",
              f"{e.cpu_launch_us_per_kernel:.3g}"],
             ["engines.pytorch-eager.launch_gap_us_per_kernel",
              f"{e.launch_gap_us_per_kernel:.3g}"],
             ["engines.pytorch-eager.launch_overlap_p", f"{e.launch_overlap_p:.3g}"]]
    bw = gpu.memory_bandwidth_gb_per_s / 1e3
    tf = gpu.dense_bf16_tflops
    copy, mm = _session_rates()
    note = (f"As rates: 1-row GEMMs stream weights at "
            f"{bw * gpu.gemv_bandwidth_efficiency_fraction:.2f} TB/s, 2-16-row GEMMs at "
            f"{bw * gpu.small_gemm_bandwidth_efficiency_fraction:.2f} TB/s, larger ones at "
            f"{bw * gpu.memory_bandwidth_efficiency_fraction:.2f} TB/s{copy}; compute-bound "
            f"GEMMs run at {tf * gpu.compute_efficiency_fraction:.0f} TFLOP/s{mm}.")
    return md_table(["parameter (src/presets/h200_calibration.toml)", "value"], rows) + \
        "\n\n" + note


def available(cal_dir: Path = CALIBRATION_DIR) -> bool:
    """Whether the data beside the project (../shared/calibration) that the `validation-shared`
    block and the plot read are present."""
    return any((cal_dir / name).is_file() for name in (
        "h200/h200_step_times_ms.csv", "vidur_nonattention_forward_ms.csv",
        "vidur_all_reduce_ms.csv", "vidur_a100_cpu_overheads.csv"))


def block(vllm_result: dict | None = None, cal_dir: Path = CALIBRATION_DIR,
          sets: list[DataSet] | None = None) -> str:
    """design.md's generated `validation` block: the data sets in the repository."""
    sets = data_sets(cal_dir, vllm_result) if sets is None else sets
    return (parameters_markdown() + "\n\nPredicted vs measured, per data set in the repository "
            "(error = predicted / measured - 1; `plots/validation_step_time.png` shows every "
            "step time).\n\n" + markdown([s for s in sets if not s.shared]))


def session_comparison(cal_dir: Path = CALIBRATION_DIR) -> str:
    """How the two H200 sessions differ where both timed the same configuration: per model the
    median of (other session's time / fitted session's time), graph forward rows (each kernel)
    and prefill rows. Empty where the other session is absent."""
    pairs = [(REPO / FIT_MEASUREMENTS[0], cal_dir / "h200" / "h200_step_times_ms.csv",
              "graph forward rows"),
             (REPO / FIT_MEASUREMENTS[1], cal_dir / "h200" / "h200_prefill_times_ms.csv",
              "prefill rows")]
    key = ["model", "mode", "what", "attention_backend", "batch", "positions", "context"]
    parts = []
    for ours, other, what in pairs:
        if not (ours.is_file() and other.is_file()):
            continue
        both = pd.read_csv(ours).merge(pd.read_csv(other), on=key, suffixes=("_ours", "_other"))
        both = both[(both["mode"] == "graph") & (both["what"] != "attention_only")]
        ratio = both["median_ms_other"] / both["median_ms_ours"]
        per_model = ", ".join(f"{m} {np.median(r):.3f}" for m, r in ratio.groupby(both["model"]))
        parts.append(f"{what}: {len(both)} configurations, median ratio {per_model}")
    if not parts:
        return ""
    return ("The two H200 sessions where both timed the same configuration (time in the other "
            "session / time in the fitted one): " + "; ".join(parts) + ".")


def shared_block(sets: list[DataSet], cal_dir: Path = CALIBRATION_DIR) -> str:
    """design.md's generated `validation-shared` block: the data sets read from
    ../shared/calibration (an empty list where it is absent) and session_comparison()."""
    comparison = session_comparison(cal_dir)
    return ("Predicted vs measured, per data set beside the project (../shared/calibration). "
            "\"not used\": vidur's A100 all-reduce rows, which the model does not follow "
            "(section 11, \"Tensor-parallel all-reduce\")."
            + (f" {comparison}" if comparison else "") + "\n\n"
            + markdown([s for s in sets if s.shared]))


KIND_MARKERS = {DECODE: "o", VERIFY: "s", PREFILL: "D", ATTENTION: ".", DRAFT: "^",
                PER_TOKEN: "v", LAYERS: "h"}
LEGEND_FONT_PT = 10


def plot_figure(sets: list[DataSet]):
    """The figure of plots/validation_step_time.png: per value, predicted against measured time
    (top, log-log, with the y = x line and the +-20% band) and the relative error predicted /
    measured - 1 against measured time (bottom). Whole steps (H200 sessions, published step
    times) on the left, vidur's decoder layers without attention on the right. Colour: the data
    set (GPU and who measured); marker: the kind of pass; filled: fitted to, hollow: checked
    only. Three small legends below the panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    timed = [s for s in sets if s.step_time]
    panels = [("Whole forward passes and published step times",
               [s for s in timed if not s.name.startswith("vidur")]),
              ("Decoder layers without attention (vidur's A100/H100 profiles)",
               [s for s in timed if s.name.startswith("vidur")])]
    panels = [(title, group) for title, group in panels if group]
    sources = list(dict.fromkeys(s.source for _, g in panels for s in g))
    palette = plt.cm.tab10(np.arange(len(sources)) % 10)
    colour = dict(zip(sources, palette))
    kinds = [k for k in KIND_MARKERS if any(k in s.kinds for _, g in panels for s in g)]
    fig, axes = plt.subplots(2, len(panels), figsize=(7.0 * len(panels), 11), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, (title, group) in enumerate(panels):
        top, bottom = axes[0, col], axes[1, col]
        lo = min(min(s.measured.min(), s.predicted.min()) for s in group) / 1.5
        hi = max(max(s.measured.max(), s.predicted.max()) for s in group) * 1.5
        xs = np.geomspace(lo, hi, 50)
        top.fill_between(xs, xs * (1 - BAND), xs * (1 + BAND), color="0.88", zorder=0)
        top.plot(xs, xs, color="0.3", lw=1, zorder=1)
        bottom.axhspan(-100 * BAND, 100 * BAND, color="0.88", zorder=0)
        bottom.axhline(0, color="0.3", lw=1, zorder=1)
        # attention-only points first (underneath), whole passes on top
        for s in sorted(group, key=lambda s: ATTENTION not in s.kinds):
            kind = np.array(s.kinds)
            many = len(s.measured) > 500
            for k in kinds:
                on = kind == k
                if not on.any():
                    continue
                style = dict(marker=KIND_MARKERS[k], s=6 if many else (40 if k == ATTENTION
                                                                        else 22),
                             facecolors=colour[s.source] if s.role == "fitted" else "none",
                             edgecolors=colour[s.source], linewidths=0.9,
                             alpha=0.35 if many else 0.8, zorder=2)
                if k == ATTENTION:  # a dot has no edge to leave hollow
                    style.update(facecolors=colour[s.source], linewidths=0)
                top.scatter(s.measured[on], s.predicted[on], **style)
                bottom.scatter(s.measured[on], 100 * s.errors[on], **style)
        worst = max(float(np.abs(s.errors).max()) for s in group) * 100
        limit = max(2 * 100 * BAND, worst * 1.1)
        for ax in (top, bottom):
            ax.set_xscale("log")
            ax.set_xlim(lo, hi)
            ax.grid(True, which="major", color="0.82", lw=0.5)
            ax.tick_params(labelsize=10)
        top.set_yscale("log")
        top.set_ylim(lo, hi)
        top.set_title(title, fontsize=12)
        top.set_ylabel("predicted by the hardware cost model, ms", fontsize=11)
        top.set_xlabel("measured, ms", fontsize=11)
        bottom.set_ylim(-limit, limit)
        bottom.set_ylabel("error: predicted / measured - 1, %", fontsize=11)
        bottom.set_xlabel("measured, ms", fontsize=11)
    fig.suptitle("Step times: the hardware cost model's prediction against measurement",
                 fontsize=14)
    source_handles = [Patch(facecolor=colour[src], edgecolor=colour[src], label=src)
                      for src in sources]
    kind_handles = [Line2D([], [], ls="none", marker=KIND_MARKERS[k], color="0.25",
                           markersize=9 if k == ATTENTION else 7, label=k) for k in kinds]
    how_handles = [Line2D([], [], ls="none", marker="o", color="0.25", markersize=7,
                          label="filled: fitted to"),
                   Line2D([], [], ls="none", marker="o", markerfacecolor="none",
                          markeredgecolor="0.25", markersize=7, label="hollow: checked only"),
                   Line2D([], [], color="0.3", lw=1, label="predicted = measured"),
                   Patch(facecolor="0.88", label=f"within +-{100 * BAND:.0f}%")]
    fig.tight_layout(rect=(0, 0.13, 1, 0.97))
    for x, title, handles in ((0.02, "data set (colour)", source_handles),
                              (0.40, "kind of pass (marker)", kind_handles),
                              (0.74, "fill and band", how_handles)):
        fig.legend(handles=handles, title=title, loc="upper left", bbox_to_anchor=(x, 0.125),
                   fontsize=LEGEND_FONT_PT, title_fontsize=LEGEND_FONT_PT + 1, frameon=False,
                   alignment="left")
    return fig


def plot_bytes(sets: list[DataSet]) -> bytes:
    """plots/validation_step_time.png (plot_figure) as PNG bytes."""
    from src.reporting import png_bytes

    return png_bytes(plot_figure(sets))


if __name__ == "__main__":
    everything = data_sets()
    print(block(sets=everything))
    if available():
        print("\n" + shared_block(everything))
    sys.exit(0)
