"""summary.txt's part for a hardware scenario: assumptions and the answers H1..H6.

Input: the dict src/hardware/study.run_scenario returns - the scenario, its simulated results (one
row per grid point and engine profile), the steady-state sweeps over batch x gamma x context, and
the step-time breakdown at the mean context. Nothing here simulates.
"""
from __future__ import annotations

import textwrap

import pandas as pd

from src.calibration.shipped import summary_lines as whole_pass_error_lines
from src.costmodel import IDEAL_ENGINE, PRESETS_DIR, load_engine_profiles, load_presets
from src.hardware import schedules
from src.metrics import best_gamma
from src.mode_comparison import comparison_lines
from src.reference_summary import grid_edge_lines
from src.reporting import describe_alpha, describe_length, ordered, table

PARAMS_FILE = PRESETS_DIR / "costmodel_params.toml"


def fit_error_summary() -> str:
    """The cost model's fitted error, as scripts/fit_costmodel.py recorded it in the params file."""
    for line in PARAMS_FILE.read_text().splitlines():
        if line.startswith("#") and "fit over" in line:
            return (line.lstrip("# ").strip().rstrip(".")
                    + " (vidur's measured non-attention forward times, A100/H100)")
    return "fitted error not recorded (run scripts/fit_costmodel.py)"


def _table(header, rows, indent="   "):
    return table(header, rows, indent)


def _speedup_text(by_gamma: pd.DataFrame, gamma: int) -> str:
    """'g4 1.950 [1.941, 1.960]' (the CI where the rows have one) from rows indexed by gamma."""
    r = by_gamma.loc[gamma]
    ci = (f" [{r.speedup_ci_low:.3f}, {r.speedup_ci_high:.3f}]" if "speedup_ci_low" in r.index
          else "")
    return f"g{gamma} {r.speedup:.3f}{ci}"


def batch_one_note(sim: pd.DataFrame, steady: pd.DataFrame, engine_names: list[str],
                   modes: list[str], mean_context: float, confidence: float) -> list[str]:
    """Why the best gamma at the smallest batch differs between H1 (simulated) and H4 (closed
    form): per (engine, quality mode) where they disagree, the two gammas' speedups under both
    models, then what differs between the models. Empty where they agree everywhere."""
    b1 = int(sim.batch_size.min())
    closed = steady[steady.mean_context & (steady.batch_size == b1)]
    pairs = []
    for e in engine_names:
        for m in modes:
            s = sim[(sim.engine_profile == e) & (sim.quality_mode == m) & (sim.batch_size == b1)]
            c = closed[(closed.engine_profile == e) & (closed.quality_mode == m)]
            if s.empty or c.empty:
                continue
            g_sim = int(s.loc[s.speedup.idxmax(), "gamma"])
            g_closed = int(c.loc[c.speedup.idxmax(), "gamma"])
            if g_sim != g_closed:
                pairs.append((e, m, s.set_index("gamma"), c.set_index("gamma"), g_sim, g_closed))
    if not pairs:
        return []
    out = [f"   Best gamma at B={b1}: H1 simulates it, this closed form computes it, and they "
           f"differ (closed form at the mean context, {mean_context:.0f} tokens):"]
    gaps, halves = [], []
    for e, m, s, c, g_sim, g_closed in pairs:
        gs = (g_sim, g_closed)
        gaps.append(abs(c.speedup[g_closed] / c.speedup[g_sim] - 1))
        halves += [(s.speedup_ci_high[g] - s.speedup_ci_low[g]) / 2 / s.speedup[g] for g in gs]
        out.append(f"     {e}, {m}: closed form "
                   + " vs ".join(_speedup_text(c, g) for g in gs[::-1])
                   + f" ({gaps[-1]:.1%} apart); simulated "
                   + " vs ".join(_speedup_text(s, g) for g in gs))
    half = f"{min(halves):.1%}" + ("" if f"{min(halves):.1%}" == f"{max(halves):.1%}"
                                  else f" to {max(halves):.1%}")
    text = ("They are different models of one question: the closed form holds every sequence at "
            "one context and lets every step commit its expected tokens; the simulation grows "
            "each context from its prompt, cuts each request's last step at its output length "
            "(which costs long gammas more) and carries Monte Carlo noise. ")
    if max(gaps) < min(halves):
        text += (f"The closed form puts the two gammas at most {max(gaps):.1%} apart, less than "
                 f"the half-width of the simulation's {confidence:.0%} CIs on them ({half}), so "
                 "either gamma is as good at this batch. ")
    else:
        text += (f"The closed form puts the two gammas up to {max(gaps):.1%} apart, not less than "
                 f"the half-width of the simulation's {confidence:.0%} CIs on them ({half}): "
                 "the models, not only noise, disagree. ")
    text += ("The serving section's default gamma (python run.py serve) is this closed form's "
             "best at batch 1, at that workload's mean context.")
    out += textwrap.wrap(text, 100, initial_indent="   ", subsequent_indent="   ")
    return out


def summary_text(hw: dict, reference: pd.DataFrame | None) -> str:
    sc, sim, steady, breakdown = hw["scenario"], hw["results"], hw["steady"], hw["breakdown"]
    cfg = sc.study
    presets = load_presets(sc.preset_paths)
    gpu = presets.gpu(sc.gpu_id)
    engines = load_engine_profiles(extra_paths=sc.preset_paths)
    modes, engine_names = ordered(sim, "quality_mode"), ordered(sim, "engine_profile")
    batches = sorted(sim.batch_size.unique())
    out = [f"Hardware scenario: {sc.name}", "=" * (19 + len(sc.name)), ""]
    out.append("Assumptions (every figure in this part comes from the hardware cost model; "
               "design.md, sections 10 and 11)")
    out.append(f"  deployment   {sc.description}")
    out.append(f"  GPU          {gpu.name} x TP {sc.tp}: {gpu.dense_bf16_tflops:g} dense BF16 "
               f"TFLOP/s, {gpu.memory_bandwidth_gb_per_s:g} GB/s, {gpu.memory_gb:g} GB")
    draft = {"eagle": "an EAGLE-style one-layer head",
             "ngram": "prompt lookup (n-gram) on the host",
             "self": "the target itself (self-speculation)"}.get(sc.draft, sc.draft)
    budget = (f", draft KV budget {sc.draft_kv_budget_tokens} tokens"
              if sc.draft_kv_budget_tokens else "")
    out.append(f"  models       target {sc.target_model_id}; "
               f"draft {draft} (draft TP {sc.draft_tp}){budget}")
    for name in engine_names:
        out.append(f"  engine       {name}: {engines[name].description}")
    if cfg.temperature > 0:
        out.append(f"  sampling     temperature {cfg.temperature:g}: every target pass pays the "
                   "sampler's and rejection sampler's probability traffic (design.md, 'Sampling "
                   "at temperature > 0'); acceptance as given at that temperature")
    tokens = sc.max_tokens_per_seq()
    largest = sc.cost_model(IDEAL_ENGINE).largest_batch_that_fits(tokens)  # memory: engine-free
    out.append(f"  memory       {gpu.memory_gb:g} GB per GPU; the largest batch whose KV cache "
               f"fits with every sequence at its longest ({tokens} tokens) is {largest}")
    out.append(f"  context      prompts {describe_length(cfg.prompt_len)}; outputs "
               f"{describe_length(cfg.output_len)}; "
               f"the KV cache grows as tokens")
    out.append("               are generated (mean context during decoding "
               f"{hw['mean_context']:.0f} tokens)")
    for m in modes:
        out.append(f"  acceptance   {m}: {describe_alpha(cfg.alpha_modes[m])}")
        if getattr(cfg.alpha_modes[m], "source", ""):
            out.append(f"               ({m}: {cfg.alpha_modes[m].source})")
    if sc.acceptance_source:
        out.append(f"               source: {sc.acceptance_source}")
    out.append(f"  cost model   {fit_error_summary()}")
    out += [f"               {line}" for line in whole_pass_error_lines()]  # recorded by calibrate
    out.append(f"  serving      {', '.join(cfg.serving_modes)}; {cfg.verification} verification; "
               f"CIs {cfg.confidence:.0%}, widest half-width "
               f"{((sim.speedup_ci_high - sim.speedup_ci_low) / 2).max():.4f}")
    out.append("  scope        decode only: prefill is not modelled (every request starts with its "
               "prompt cached), so")
    out.append("               speedups and tokens/s are those of the decode phase; no preemption, "
               "no prefill interference")
    out.append("")

    best = best_gamma(sim, ["engine_profile", "quality_mode", "serving_mode", "batch_size"])
    serving = cfg.serving_modes[-1]
    out.append("H1. Does the gain survive batching on this hardware? Best-gamma speedup (gamma) by "
               f"batch size, {serving}:")
    rows = []
    for m in modes:
        if reference is not None and m in set(reference.quality_mode):
            ref = best_gamma(reference[reference.serving_mode == serving],
                                            ["quality_mode", "batch_size"])
            ref = ref[ref.quality_mode == m].set_index("batch_size")
            rows.append([f"{m}, flat reference"]
                        + [f"{ref.loc[b, 'speedup']:.2f} (g{ref.loc[b, 'gamma']})"
                                                    if b in ref.index else "-" for b in batches])
        for e in engine_names:
            sub = best[(best.engine_profile == e) & (best.quality_mode == m)
                       & (best.serving_mode == serving)]
            sub = sub.set_index("batch_size")
            rows.append([f"{m}, {e}"]
                        + [f"{sub.loc[b, 'speedup']:.2f} (g{sub.loc[b, 'gamma']})"
                           for b in batches])
    out.append(_table(["quality mode, cost"] + [f"B={b}" for b in batches], rows))
    out.append("")
    for e in engine_names:
        for m in modes:
            sub = best[(best.engine_profile == e) & (best.quality_mode == m)
                       & (best.serving_mode == serving)]
            s = sub.set_index("batch_size").speedup
            kept = [b for b in batches if s[b] >= 0.95 * s[batches[0]]]
            last_kept = max(b for b in batches
                            if all(s[x] >= 0.95 * s[batches[0]] for x in batches if x <= b))
            verdict = ("never falls below 95% of its batch-1 value" if len(kept) == len(batches)
                       else f"at least 95% of its batch-1 value up to B={last_kept}")
            below = [b for b in batches if s[b] < 1.0]
            if not below:
                verdict += "; faster than greedy at every batch"
            elif below == [b for b in batches if b >= below[0]]:
                verdict += f"; from B={below[0]} on even the best gamma is slower than greedy"
            else:
                verdict += ("; even the best gamma is slower than greedy at "
                            f"B={', '.join(map(str, below))}")
            out.append(f"   {e}, {m}: {s[batches[0]]:.2f}x at B={batches[0]} -> "
                       f"{s[batches[-1]]:.2f}x at B={batches[-1]}; {verdict}.")
    out += grid_edge_lines(best[best.serving_mode == serving], sorted(sim.gamma.unique()),
                           ["engine_profile", "quality_mode", "batch_size"])
    out.append("")

    out.append("H2. Crossover batch size: the smallest simulated batch at which speculation is "
               "slower than greedy")
    out.append(f"    ('-' = faster at every batch up to {batches[-1]}), by gamma, {serving}:")
    rows = []
    gammas = sorted(sim.gamma.unique())
    for g in gammas:
        row = [g]
        for e in engine_names:
            for m in modes:
                sub = sim[(sim.engine_profile == e) & (sim.quality_mode == m)
                          & (sim.serving_mode == serving)
                          & (sim.gamma == g)].sort_values("batch_size")
                c = schedules.crossover_batch(sub.batch_size.to_numpy(), sub.speedup.to_numpy())
                row.append("-" if c is None else c)
        rows.append(row)
    out.append(_table(["gamma"] + [f"{e}/{m}" for e in engine_names for m in modes], rows))
    out.append("")

    out.append("H3. Optimal gamma by batch size as vLLM --speculative-config keys (dynamic "
               "speculative decoding):")
    out.append("    each [first batch, last batch, gamma] entry is an inclusive batch range, gamma "
               "0 = speculation")
    out.append("    off, and vLLM keeps the last gamma beyond the last range; add your draft's "
               "\"model\" and")
    out.append("    \"method\" keys. Below each: the throughput the schedule gains over the best "
               "single fixed gamma")
    out.append("    and over gamma 2 (mean / max over the simulated batch sizes). It switches "
               "gamma only where the")
    out.append("    difference is resolved: a batch size keeps the previous batch size's gamma "
               "(else the smallest one)")
    out.append(f"    while that gamma's {cfg.confidence:.0%} CI overlaps the best gamma's; a line "
               "says where it is not the best point")
    out.append("    estimate (design.md, section 11).")
    out += textwrap.wrap(
        "Optimised for: this study's simulated fixed batch (every request queued at time 0, "
        f"prompts {describe_length(cfg.prompt_len)}, outputs {describe_length(cfg.output_len)}, "
        f"mean context {hw['mean_context']:.0f} tokens during decoding, decode only), per "
        "acceptance mode; `serve` and `recommend` optimise for their own context and load (the "
        "serving section compares its schedule with this one):", 100,
        initial_indent="    ", subsequent_indent="    ")
    for s in schedules.schedules(sim):
        if s["serving_mode"] != serving:
            continue
        gains = (f"vs the best fixed gamma ({s['best_fixed_gamma']}): "
                 f"{s['gain_vs_best_fixed'][0]:+.1%} / {s['gain_vs_best_fixed'][1]:+.1%}")
        if s["gain_vs_gamma_2"] is not None and s["best_fixed_gamma"] != 2:
            gains += (f"; vs gamma 2: {s['gain_vs_gamma_2'][0]:+.1%} / "
                      f"{s['gain_vs_gamma_2'][1]:+.1%}")
        out.append(f"   {s['engine_profile']}, {s['quality_mode']}:")
        out.append(f"     {schedules.vllm_config_json(s)}")
        for r in s["within_ci"].itertuples():
            out.append(f"     B={r.batch_size}: gamma {r.gamma} is within the CI of the best, "
                       f"gamma {r.best_gamma} ({r.speedup:.3f} [{r.speedup_ci_low:.3f}, "
                       f"{r.speedup_ci_high:.3f}] vs {r.best_speedup:.3f} [{r.best_ci_low:.3f}, "
                       f"{r.best_ci_high:.3f}])")
        out.append(f"     {gains}")
    out.append("")

    contexts = sorted(steady.context_len_tokens[~steady.mean_context].unique())
    out.append("H4. Where context length changes the answer: best gamma (0 = off) by (batch range, "
               "context range),")
    out.append("    steady state (closed form, src/hardware/steady_state.py), grid batch sizes and "
               f"contexts {contexts[0]}..{contexts[-1]} tokens;")
    out.append("    pairs whose KV cache does not fit are left out (full grid: "
               "results/hardware_steady_state.csv):")
    for e in engine_names:
        for m in modes:
            sub = steady[(steady.engine_profile == e) & (steady.quality_mode == m)
                         & ~steady.mean_context]
            rules = schedules.context_rules(best_gamma(sub, ["batch_size", "context_len_tokens"]))
            varies = any(len({r[4] for r in rules if r[0] <= b <= r[1]}) > 1
                         for b in sub.batch_size.unique())
            rows = [[f"{lo}-{hi}" if lo != hi else str(lo),
                     f"{clo}-{chi}" if clo != chi else str(clo), g]
                    for lo, hi, clo, chi, g in rules]
            out.append(f"   {e}, {m}"
                       + ("" if varies else " (context never changes the answer here)") + ":")
            out.append(_table(["batch range", "context range (tokens)", "gamma"], rows, "     "))
    check = steady[steady.mean_context].merge(
        sim[sim.serving_mode == "continuous_refill"],
        on=["engine_profile", "quality_mode", "batch_size", "gamma"],
        suffixes=("_closed", "_sim"))
    if len(check):
        diff = (check.speedup_closed / check.speedup_sim - 1).abs()
        out.append(f"   Closed form vs simulation at the mean context, {len(check)} grid points: "
                   "median "
                   f"|difference| {diff.median():.1%}, worst {diff.max():.1%} (the closed form "
                   "ignores the drain at the")
        out.append("   end of the queue and the spread of contexts within a batch).")
    out += batch_one_note(sim[sim.serving_mode == serving], steady, engine_names, modes,
                          hw["mean_context"], cfg.confidence)
    out.append("")

    m0 = modes[0]
    out.append(f"H5. Speedup vs batch size per context length ({m0}, best gamma, steady state):")
    for e in engine_names:
        sub = steady[(steady.engine_profile == e) & (steady.quality_mode == m0)
                     & ~steady.mean_context]
        bst = best_gamma(sub, ["batch_size", "context_len_tokens"])
        piv = bst.pivot_table(index="batch_size", columns="context_len_tokens", values="speedup")
        rows = [[b] + [("." if c not in piv.columns or pd.isna(piv.loc[b, c])
                        else f"{piv.loc[b, c]:.2f}")
                       for c in contexts] for b in piv.index]
        out.append(f"   {e}:")
        out.append(_table(["batch \\ context"] + [str(c) for c in contexts], rows, "     "))
    out.append("")

    g_ref = int(breakdown.gamma.iloc[0])
    out.append(f"H6. A speculative step at gamma {g_ref} and the mean context "
               f"({int(breakdown.context_len_tokens.iloc[0])} "
               "tokens), ms; engine overhead split by mechanism")
    out.append("    (cpu: per-step and per-sequence CPU work, rejection sampling, KV bookkeeping, "
               "as far as the GPU")
    out.append("    step does not hide it where the engine overlaps the two; catch-up: the draft "
               "re-reading committed")
    out.append("    tokens, or its first pass over every verified position; expansion: "
               "batch-expansion scoring;")
    out.append("    factor: the fitted verification attention slowdown factor; design.md section "
               "11):")
    rows = []
    for r in breakdown.itertuples():
        greedy = r.decode_physics_ms + r.decode_overhead_ms
        total = (r.draft_physics_ms + r.draft_overhead_ms + r.verify_physics_ms
                 + r.verify_overhead_ms)
        rows.append([r.engine_profile, r.batch_size, f"{greedy:.2f}", f"{r.draft_physics_ms:.2f}",
                     f"{r.verify_physics_ms:.2f}", f"{r.overhead_cpu_ms:.2f}",
                     f"{r.overhead_draft_catchup_ms:.2f}",
                     f"{r.overhead_batch_expansion_ms:.2f}",
                     f"{r.overhead_attention_factor_ms:.2f}",
                     f"{total:.2f}", f"{total / greedy:.2f}"])
    out.append(_table(["engine", "B", "greedy step", "draft GPU", "verify GPU", "cpu", "catch-up",
                       "expansion",
                       "factor", "spec step", "step-time ratio"], rows))
    out.append("    (step-time ratio = spec step / greedy step: how much longer one speculative "
               "step takes, not a")
    out.append("    speedup; speculation pays where it is below the tokens a step commits per "
               "sequence)")
    attr = hw.get("attribution")
    if attr is not None and len(attr):
        b_hi = int(attr.batch_size.iloc[0])
        out.append("")
        out.append(f"   Where the loss at B={b_hi} comes from: best-gamma speedup (closed form, "
                   "mean context) as each")
        out.append("   mechanism of the engine profile is added to the GPU physics:")
        for e in ordered(attr, "engine_profile"):
            sub = attr[attr.engine_profile == e]
            flat = sub.groupby("quality_mode").speedup.nunique().max() <= 1
            if flat and len(ordered(attr, "engine_profile")) > 1:
                continue  # a profile without overhead (ideal): every column equals physics only
            labels = list(dict.fromkeys(sub.variant))
            speedup = sub.set_index(["quality_mode", "variant"]).speedup
            rows = [[m] + [f"{speedup[(m, v)]:.2f}" for v in labels]
                    for m in ordered(sub, "quality_mode")]
            out.append(f"   engine {e}:")
            out.append(_table(["quality mode"] + labels, rows, "     "))
    out.append("")

    compared = {e: comparison_lines(sim[sim.engine_profile == e], cfg.alpha_modes, modes, "     ")
                for e in engine_names}
    if any(compared.values()):
        out.append("H7. Per-position vs i.i.d. acceptance: how the optimal gamma and speedup "
                   "differ (simulated):")
        for e, lines in compared.items():
            out.append(f"   engine {e}:")
            out += lines
    return "\n".join(out) + "\n"
