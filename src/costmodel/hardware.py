"""HardwareCostModel: step times in ms of a target and its draft on real hardware.

GPU physics (src/costmodel/roofline.py) plus an engine's overheads (src/costmodel/engines.py),
with the memory fit checked on every call (src/costmodel/memory.py). Implements the CostModel
protocol the engine loop asks (src/costmodel/flat.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from src.costmodel.drafts import (
    STATEFUL_DRAFT_KINDS,
    DraftSpec,
    draft_network,
    kind_listed,
    target_footprint,
)
from src.costmodel.engines import EngineProfile, engine_profile
from src.costmodel.memory import memory_needed_bytes, memory_usable_bytes, raise_does_not_fit
from src.costmodel.moe import expected_distinct_experts
from src.costmodel.passload import PassLoad, StepBreakdown
from src.costmodel.presets import (
    AllReduceFit,
    AttentionKernelFit,
    CostModelInputError,
    CostModelParams,
    GpuSpec,
    ModelSpec,
    check_int,
    check_tp,
    load_presets,
)
from src.costmodel.roofline import (
    PassCoefficients,
    launch_overhead_s,
    pass_coefficients,
    pass_components_s,
    pass_time_table_ms,
    window_context_tokens,
)
from src.costmodel.sampling import TEMPERATURE_RANGE, sampler_traffic, sampling_ms_table
from src.costmodel.variants import check_ep


@dataclass(frozen=True)
class HardwareCostModel:
    """Step times in ms from the physical model plus an engine profile (implements `CostModel`).

    target_pass_time: one target pass over positions_per_seq positions of every active sequence.
    draft_passes_time: gamma sequential one-position draft passes; pass k (0-based) sees every
    context grown by k (capped at the draft's KV budget). Each is physics + engine overhead;
    `target_pass_parts` / `draft_passes_parts` return the two separately (see EngineProfile for
    the overhead formulas). Both reduce the [R, B] inputs to per-replication sums (active count S,
    context sum C) first and then work on [R] arrays, so a call costs a few dozen numpy operations
    on [R]. Every call also checks that weights + KV cache fit (raises CostModelInputError).
    Build one with `HardwareCostModel.from_presets(...)`.
    """

    gpu: GpuSpec
    target: ModelSpec
    engine: EngineProfile  # the serving engine's implementation and overheads (engines.toml)
    tp: int = 1
    draft: DraftSpec = DraftSpec(kind="ngram")
    params: CostModelParams = CostModelParams()
    allreduce: tuple[AllReduceFit, ...] = ()
    attention_fits: tuple[AttentionKernelFit, ...] = ()  # fitted attention kernels (Presets)
    time_unit: str = "ms"
    ep: int = 1  # expert-parallel degree of the target's MoE layers (1 = TP over the expert FFN)
    # measured GEMMs (and MoE layers) of the target network (src/kernels/pass_gemms.py PassGemms,
    # built by src/kernels/costmodel.py with_kernels; duck-typed: costmodel sits below kernels):
    # an object whose pass_delta_ms(S, t) is the ms they add to a pass of S sequences x t
    # positions; None = the roofline, bit for bit
    kernels: object | None = field(default=None, compare=False)
    # measured decode attention of the target pass (src/kernels/pass_attention.py PassAttention,
    # set by with_kernels; duck-typed): replace_ms(attention_ms, n_seqs, sum_ctx, t) is the
    # attention term with the measured kernel where its table prices the pass; None = roofline
    attention_kernels: object | None = field(default=None, compare=False)
    # sampling temperature: > 0 adds the sampler's probability traffic to every target pass
    # (src/costmodel/sampling.py); 0 = greedy, today's step times bit for bit
    sampling_temperature: float = 0.0
    _target_c: PassCoefficients = field(init=False, repr=False, compare=False)
    _draft_c: PassCoefficients | None = field(init=False, repr=False, compare=False)
    _weight_bytes_gpu0: float = field(init=False, repr=False, compare=False)
    _kv_bytes_per_token_gpu0: float = field(init=False, repr=False, compare=False)
    _kv_bytes_per_seq_gpu0: float = field(init=False, repr=False, compare=False)
    # lazily built lookup tables of the attention-free pass time, ms (instance cache, not state)
    _tables: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self):
        check_tp(self.target, self.tp)
        low, high = TEMPERATURE_RANGE
        if not low <= self.sampling_temperature <= high:
            raise CostModelInputError("temperature", f"must be in {low:g}..{high:g}, got "
                                                     f"{self.sampling_temperature}")
        p = self.params
        set_ = object.__setattr__
        # physics only: the engine's CPU overhead is added by _target_parts / _draft_parts; the
        # engine picks the all-reduce implementation, which is physics at TP > 1
        # its implementation (kernel counts, attention kernel, launches) shapes the physics too
        ar = {"allreduce_implementation": self.engine.allreduce, "engine": self.engine,
              "attention_fits": self.attention_fits}
        check_ep(self.target, self.ep, self.tp)
        set_(self, "_target_c", pass_coefficients(self.gpu, self.target, self.tp, p,
                                                  self.allreduce, ep=self.ep, **ar))
        weight, kv, per_seq = target_footprint(self.target, self.tp)
        d = self.draft
        budget = d.kv_budget_tokens
        if budget is not None:
            check_int("draft_kv_budget_tokens", budget, 1)
            if d.kind == "ngram":
                raise CostModelInputError(
                    "draft_kv_budget_tokens", "an n-gram draft has no KV cache; allowed: a draft "
                    "model, eagle, eagle3, mtp or self")
        draft_per_seq = 0.0
        if d.kind == "self":
            if d.model is not None and d.model != self.target:
                raise CostModelInputError("draft", "kind 'self' drafts with the target itself")
            if d.tp != self.tp:
                raise CostModelInputError(
                    "draft_tp", f"a self-speculation draft runs at the target's tp={self.tp}, "
                    f"got {d.tp}; allowed: {self.tp}")
            set_(self, "_draft_c", self._target_c)
            # no extra weights; without a budget the draft reads the target's own KV cache
            draft_kv = kv if budget is not None else 0.0
        elif d.kind == "ngram":
            set_(self, "_draft_c", None)
            draft_kv = 0.0
        else:  # a network of its own: model, eagle, eagle3, mtp (drafts.py)
            c, draft_weight, draft_kv, draft_per_seq = draft_network(
                self.gpu, self.target, self.tp, d, p, self.allreduce, ar)
            set_(self, "_draft_c", c)
            weight += draft_weight
        if budget is None:
            kv += draft_kv
            per_seq += draft_per_seq
        else:  # a capped draft cache holds at most `budget` tokens per sequence
            per_seq += draft_kv * budget
        set_(self, "_weight_bytes_gpu0", weight)
        set_(self, "_kv_bytes_per_token_gpu0", kv)
        set_(self, "_kv_bytes_per_seq_gpu0", per_seq)
        need = memory_needed_bytes(weight, kv, 0)
        if need > memory_usable_bytes(self.gpu, p):
            raise_does_not_fit(self.gpu, p, self._what(), float(need), weight, 0, self.target)

    @classmethod
    def from_presets(
        cls,
        gpu: str,
        target: str,
        *,
        engine: EngineProfile | str,
        tp: int = 1,
        draft: str | None = "ngram",
        draft_tp: int = 1,
        preset_paths: Iterable[str | Path] = (),
        params: CostModelParams | None = None,
        draft_kv_budget_tokens: int | None = None,
        ep: int = 1,
        target_formats: Mapping[str, str] | None = None,
        temperature: float = 0.0,
    ) -> "HardwareCostModel":
        """Build from preset ids (or paths to Hugging Face config.json files). draft: a model id
        (a stand-alone draft, or an EAGLE-3 head where its preset says architecture "eagle3"),
        "eagle", "eagle3" (a head derived from the target), "mtp" (the target's MTP module),
        "ngram", "self" (self-speculation: draft_tp is taken as tp) or None (= "ngram"). ep:
        expert-parallel degree of the MoE layers (1 = TP over the expert FFN, or = tp). params:
        overrides the loaded fitted parameters. engine: an EngineProfile or a profile name of
        src/presets/engines.toml (or of a preset file). target_formats: ModelSpec format fields
        (weight_format, expert_weight_format, kv_cache_format) that replace the preset's, as a
        scenario's `weights` / `kv_cache` keys give them. temperature: the sampling
        temperature, 0..2 (> 0 prices the sampler's probability traffic: sampling.py)."""
        preset_paths = tuple(preset_paths)
        presets = load_presets(preset_paths)
        gpu_spec = presets.gpu(gpu)
        target_spec = presets.model(target, "target")
        if target_formats:
            target_spec = replace(target_spec, **target_formats)
        budget = draft_kv_budget_tokens
        if draft is None or draft == "ngram":
            draft_spec = DraftSpec(kind="ngram", kv_budget_tokens=budget)
        elif draft in ("eagle", "eagle3", "mtp"):
            draft_spec = DraftSpec(kind=draft, tp=tp, kv_budget_tokens=budget)
        elif draft == "self":
            draft_spec = DraftSpec(kind="self", model=target_spec, tp=tp, kv_budget_tokens=budget)
        else:
            spec = presets.model(draft, "draft")
            if spec.architecture == "eagle3":
                draft_spec = DraftSpec(kind="eagle3", model=spec, tp=tp, kv_budget_tokens=budget)
            else:
                draft_spec = DraftSpec(kind="model", model=spec, tp=draft_tp,
                                       kv_budget_tokens=budget)
        if isinstance(engine, str):
            engine = engine_profile(engine, extra_paths=preset_paths)
        return cls(gpu=gpu_spec, target=target_spec, tp=tp, draft=draft_spec,
                   params=presets.params if params is None else params,
                   allreduce=presets.allreduce, engine=engine, attention_fits=presets.attention,
                   ep=ep, sampling_temperature=temperature)

    def _what(self) -> str:
        d = self.draft
        name = d.model.model_id if d.kind == "model" else d.kind
        ep = f", ep={self.ep}" if self.ep > 1 else ""
        return f"{self.target.model_id} at tp={self.tp}{ep} with draft {name}"

    def distinct_experts(self, n_seqs, positions_per_seq):
        """Expected distinct routed experts each MoE layer of the target reads in one pass of
        n_seqs sequences x positions_per_seq positions (arrays broadcast; 0 for a dense target):
        moe.expected_distinct_experts under the target's routing model."""
        r = self._target_c.moe
        if r is None:
            return np.zeros(np.broadcast(np.asarray(n_seqs), np.asarray(positions_per_seq)).shape)
        return expected_distinct_experts(r.n_experts, r.top_k, n_seqs, positions_per_seq,
                                         r.locality)

    def kv_fits(self, batch: int, tokens_per_seq: int) -> tuple[bool, float, float]:
        """(fits, needed GB, usable GB) per GPU for `batch` sequences of `tokens_per_seq` cached
        tokens each (weights + target and draft KV caches)."""
        need = (self._weight_bytes_gpu0 + self._kv_bytes_per_token_gpu0 * batch * tokens_per_seq
                + self._kv_bytes_per_seq_gpu0 * batch)
        usable = memory_usable_bytes(self.gpu, self.params)
        return need <= usable, need / 1e9, usable / 1e9

    def largest_batch_that_fits(self, tokens_per_seq: int, limit: int = 8192) -> int:
        """Largest batch in 0..limit whose weights and KV caches fit with every sequence holding
        tokens_per_seq cached tokens (bisection: the memory needed grows with the batch)."""
        lo, hi = 0, limit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.kv_fits(mid, tokens_per_seq)[0] else (lo, mid - 1)
        return lo

    def _check_fits(self, kv_tokens: np.ndarray, n_seqs: np.ndarray | None = None) -> None:
        if not kv_tokens.size:
            return
        if self._kv_bytes_per_seq_gpu0 and n_seqs is not None:
            need_r = (self._kv_bytes_per_token_gpu0 * kv_tokens
                      + self._kv_bytes_per_seq_gpu0 * n_seqs)
            worst_r = int(np.argmax(need_r))
            worst, need = float(kv_tokens.flat[worst_r]), self._weight_bytes_gpu0 + float(
                need_r.flat[worst_r])
        else:
            worst = float(kv_tokens.max())
            need = self._weight_bytes_gpu0 + self._kv_bytes_per_token_gpu0 * worst
        if need > memory_usable_bytes(self.gpu, self.params):
            raise_does_not_fit(self.gpu, self.params, self._what(), need,
                                self._weight_bytes_gpu0, worst)

    def _table_ms(self, which: str, max_seqs: int, max_positions: int) -> np.ndarray:
        """Cached pass_time_table_ms (+ the attention kernels' fixed time, + the measured GEMMs'
        and MoE layers' delta at S x t where `kernels` is set; row S = 0 zeroed) of the target
        or draft (a draft network of its own keeps the roofline), physics only; grown when a
        call needs more sequences or positions (an entry does not depend on the table's size)."""
        table = self._tables.get(which)
        if table is None or table.shape[0] <= max_seqs or table.shape[1] <= max_positions:
            coeffs = self._target_c if which == "target" else self._draft_c
            have_seqs, have_positions = (0, 0) if table is None else (table.shape[0] - 1,
                                                                      table.shape[1] - 1)
            table = pass_time_table_ms(coeffs, max(max_seqs, have_seqs),
                                       max(max_positions, have_positions, 17))
            table += coeffs.attn_fixed_s * 1e3
            if self.kernels is not None and coeffs is self._target_c:  # target (or self) network
                S, t = np.indices(table.shape)
                table += self.kernels.pass_delta_ms(S, t)
            if self.sampling_temperature > 0 and which == "target":
                table += self._sampling_ms_table(table.shape[0] - 1, table.shape[1] - 1)
            table[0, :] = 0.0  # no active sequence, no pass
            self._tables[which] = table
        return table

    def _sampling_ms_table(self, max_seqs: int, max_positions: int) -> np.ndarray:
        """ms [S, t] of the sampler's probability traffic at sampling_temperature > 0
        (src/costmodel/sampling.py): bytes / (peak DRAM bandwidth x the memory bandwidth
        efficiency), over the target's full vocabulary (the sampler sees gathered logits)."""
        bw = self.gpu.memory_bandwidth_bytes_per_s * (
            self.gpu.memory_bandwidth_efficiency_fraction
            or self.params.memory_bandwidth_efficiency_fraction)
        return sampling_ms_table(sampler_traffic(self.engine.name), max_seqs, max_positions,
                                 self.target.vocab_size, bw)

    @staticmethod
    def _attention_pnorm_ms(c: PassCoefficients, n_seqs, tokens, positions_per_seq, sum_ctx):
        """Attention kernels' time without their fixed part, ms (0 where n_seqs = 0).

        Roofline attention: the formula of attention_terms_s + _pnorm, arranged for few numpy
        passes: m (1 + (k/m)^p)^(1/p) with x^p = exp(p log x). Fitted kernels (attention.py):
        the fastest, every sequence at the mean context.
        """
        if c.attn_kernels:
            n = np.asarray(n_seqs, dtype=float)
            ctx = np.asarray(sum_ctx, dtype=float) / np.maximum(n, 1)
            ms = np.min([k.pass_s(n, positions_per_seq, ctx) for k in c.attn_kernels], axis=0)
            return np.where(n > 0, ms * 1e3, 0.0)
        p = c.sharpness_p
        memory_ms = (c.attn_read_per_ctx_token_s * 1e3) * sum_ctx + (
            (c.attn_read_per_ctx_token_s + c.attn_per_new_token_s) * 1e3) * tokens
        compute_ms = (c.attn_compute_per_pair_s * 1e3) * (
            positions_per_seq * sum_ctx + tokens * ((positions_per_seq + 1) * 0.5))
        if c.attn_window_tokens:  # sliding-window layers: min(C, S W) cached tokens read
            window_ctx = window_context_tokens(c, n_seqs, sum_ctx)
            memory_ms = memory_ms + (c.attn_window_read_per_ctx_token_s * 1e3) * (
                window_ctx + tokens)
            compute_ms = compute_ms + (c.attn_window_compute_per_pair_s * 1e3) * (
                positions_per_seq * window_ctx + tokens * ((positions_per_seq + 1) * 0.5))
        ratio = compute_ms / np.maximum(memory_ms, 1e-300) + 1e-300
        return memory_ms * np.exp(np.log1p(np.exp(p * np.log(ratio))) * (1.0 / p))

    def _target_parts(self, load: PassLoad, positions_per_seq, check_fits: bool = True):
        """(physics_ms, cpu_ms, gpu_overhead_ms) [R] of one target pass; see target_pass_parts.
        check_fits False: the caller has checked the memory fit (check_step_fits)."""
        n_seqs, sum_ctx = load.n_seqs, load.sum_ctx
        t = np.asarray(positions_per_seq)
        tokens = n_seqs * t
        if check_fits:
            self._check_fits(sum_ctx + tokens, n_seqs)
        table = self._table_ms("target", load.max_seqs, int(t.max()))
        attention = self._attention_pnorm_ms(self._target_c, n_seqs, tokens, t, sum_ctx)
        if self.attention_kernels is not None:  # measured decode attention where tabled
            attention = self.attention_kernels.replace_ms(attention, n_seqs, sum_ctx, t)
        physics = table.ravel().take(n_seqs * table.shape[1] + t) + attention
        e = self.engine
        verify = t > 1
        per_seq = e.step_cpu_per_seq_ms + verify * (
            e.rejection_sampling_per_position_ms * t + e.kv_bookkeeping_per_seq_ms)
        if e.scoring_batch_expansion:  # every verified position is a sequence of its own
            per_seq = per_seq + verify * (e.step_cpu_per_seq_ms * (t - 1))
        host = load.cpu_seqs  # the busiest scheduler's sequences (PassLoad.host_seqs)
        cpu = np.where(host > 0, e.step_cpu_fixed_ms, 0.0) + host * per_seq
        # without CUDA graphs the pass waits on its kernel launches: part of the pass, not
        # CPU work that can overlap another step
        gpu = launch_overhead_s(self._target_c, physics * 1e-3, t, n_seqs) * 1e3
        if self._target_c.spec_step_eager_s and self.draft.kind in STATEFUL_DRAFT_KINDS:
            gpu = gpu + np.where(verify & (n_seqs > 0), self._target_c.spec_step_eager_s * 1e3, 0.0)
        if e.scoring_batch_expansion or e.verification_attention_slowdown_factor != 1.0:
            engine_attention = attention
            if e.scoring_batch_expansion:  # S t one-position queries, each reading its whole KV
                engine_attention = self._attention_pnorm_ms(
                    self._target_c, tokens, tokens, 1, t * sum_ctx + n_seqs * (t * (t - 1) * 0.5))
            gpu = gpu + verify * (
                e.verification_attention_slowdown_factor * engine_attention - attention)
        return physics, cpu, gpu

    def target_pass_parts(self, active, positions_per_seq, context_len_tokens):
        """(physics_ms[R], overhead_ms[R]) of one target pass; positions_per_seq: int or int[R].

        physics = attention-free table[S, t] + attention p-norm (GPU physics, ideal engine);
        overhead = step CPU + for t > 1 the rejection sampler, KV bookkeeping and the extra
        attention time of a masked verification kernel (EngineProfile). Where the engine overlaps
        CPU with GPU (asynchronous scheduling), the CPU of the whole step - this pass's and, for a
        verification, the gamma = t - 1 draft passes' - costs only max(0, CPU - GPU of the step).
        """
        return self._target_pass_parts(PassLoad.from_masks(active, context_len_tokens),
                                       positions_per_seq)

    def _target_pass_parts(self, load: PassLoad, positions_per_seq):
        physics, cpu, gpu = self._target_parts(load, positions_per_seq)
        e = self.engine
        overlap_spec = kind_listed(self.draft.kind, e.cpu_overlap_draft_kinds)
        if not (e.cpu_overlap_decode or overlap_spec):
            return physics, cpu + gpu
        t = np.asarray(positions_per_seq)
        verify = t > 1
        step_cpu, step_gpu = cpu, physics + gpu
        if overlap_spec and np.any(verify):
            g = np.where(verify, t - 1, 0)
            step_cpu = step_cpu + self._draft_cpu_ms(load.cpu_seqs, g)
            if np.any(step_cpu > step_gpu):  # only then can the drafts' GPU time matter
                d_phys, _, d_gpu = self._draft_parts(load, g)
                step_gpu = step_gpu + d_phys + d_gpu
        overlap = np.where(verify, overlap_spec, e.cpu_overlap_decode)
        return physics, gpu + np.where(overlap, np.maximum(step_cpu - step_gpu, 0.0), cpu)

    def check_step_fits(self, load: PassLoad, gamma) -> None:
        """The memory check of step_ms (CostModelInputError where weights + KV do not fit)."""
        self._check_fits(load.sum_ctx + load.n_seqs * (np.asarray(gamma) + 1), load.n_seqs)

    def step_ms(self, load: PassLoad, gamma, with_draft: bool = True, check_fits: bool = True,
                gpu_extra_ms=None):
        """(target_ms[R], draft_ms[R]) of one step that verifies gamma drafts: exactly
        target_pass_time(gamma + 1) and draft_passes_time(gamma) of `load` (draft 0 without
        with_draft), computed with the draft passes priced once (where the engine overlaps CPU
        with GPU the target pass needs them too). The serving engine's per-step call.
        check_fits False: the caller has run check_step_fits (on whichever model its rows use:
        rows at gamma 0 get the target pass time of any model with this target and engine).
        gpu_extra_ms [R]: GPU ms the caller adds to the target pass (an attention-DP worker's
        correction, src/attention_dp/worker.py), inside the step the engine's CPU overlaps."""
        gamma = np.asarray(gamma)
        t = gamma + 1
        physics, cpu, gpu = self._target_parts(load, t, check_fits)
        if gpu_extra_ms is not None:
            physics = physics + gpu_extra_ms
        e = self.engine
        overlap_spec = kind_listed(self.draft.kind, e.cpu_overlap_draft_kinds)
        draft_parts = None
        if not (e.cpu_overlap_decode or overlap_spec):
            overhead = cpu + gpu
        else:  # the branch of _target_pass_parts, step for step
            verify = t > 1
            step_cpu, step_gpu = cpu, physics + gpu
            if overlap_spec and np.any(verify):
                g = np.where(verify, t - 1, 0)
                step_cpu = step_cpu + self._draft_cpu_ms(load.cpu_seqs, g)
                if np.any(step_cpu > step_gpu):
                    # g equals gamma wherever it matters (g = gamma for gamma > 0, 0 = gamma else)
                    draft_parts = self._draft_parts(load, gamma, check_fits)
                    d_phys, _, d_gpu = draft_parts
                    step_gpu = step_gpu + d_phys + d_gpu
            overlap = np.where(verify, overlap_spec, e.cpu_overlap_decode)
            overhead = gpu + np.where(overlap, np.maximum(step_cpu - step_gpu, 0.0), cpu)
        target = physics + overhead
        if not with_draft:
            return target, np.zeros_like(target)
        d_phys, d_cpu, d_gpu = draft_parts or self._draft_parts(load, gamma, check_fits)
        if kind_listed(self.draft.kind, e.cpu_overlap_draft_kinds):
            return target, d_phys + d_gpu
        return target, d_phys + (d_cpu + d_gpu)

    def target_pass_time(self, active, positions_per_seq, context_len_tokens):
        """float[R] ms of one target pass, physics + engine overhead (0 where a replication has
        no active slot). positions_per_seq: int, or int[R] (one value per replication)."""
        physics, overhead = self.target_pass_parts(active, positions_per_seq, context_len_tokens)
        return physics + overhead

    def target_pass_time_totals(self, n_seqs, sum_context_tokens, positions_per_seq,
                                draft_mid_context=None, draft_start_context=None):
        """target_pass_time from per-pass totals: n_seqs active sequences and their summed
        context (arrays of one shape, e.g. one entry per simulated step). With a draft KV budget
        (and an engine that books the draft's CPU on this pass) the capped sums of PassLoad too."""
        load = PassLoad.from_totals(n_seqs, sum_context_tokens, draft_mid_context,
                                    draft_start_context)
        physics, overhead = self._target_pass_parts(load, positions_per_seq)
        return physics + overhead

    @property
    def draft_kv_budget_tokens(self) -> int | None:
        """Cached tokens a draft pass reads per sequence at most (None: no cap)."""
        return self.draft.kv_budget_tokens

    def _draft_sum_ctx(self, load: PassLoad, g):
        """Sum over active sequences of the context the mean draft pass reads: C + S (g-1)/2,
        or with a KV budget b, sum_i min(ctx_i + (g-1)/2, b)."""
        b = self.draft.kv_budget_tokens
        if b is None:
            return None
        return load.capped_ctx(b, (np.asarray(g) - 1) * 0.5)

    def _draft_cpu_ms(self, n_seqs, g):
        """CPU ms [R] of gamma draft passes over n_seqs sequences (n-gram: the proposer calls)."""
        e = self.engine
        if self._draft_c is None:
            calls = (g > 0) if e.ngram_one_call_per_step else g
            return np.where(n_seqs > 0, calls * e.ngram_pass_cpu_ms, 0.0)
        c = self._draft_c
        if e.draft_passes_one_graph and c.cuda_graphs and self.draft.kind in STATEFUL_DRAFT_KINDS:
            in_graphs = n_seqs <= c.cuda_graph_max_seqs if c.cuda_graph_max_seqs else True
            g = np.where(in_graphs, np.minimum(g, 2), g)  # two replays: extend + decode passes
        return g * (np.where(n_seqs > 0, e.draft_pass_cpu_fixed_ms, 0.0)
                    + e.draft_pass_cpu_per_seq_ms * n_seqs)

    def _draft_parts(self, load: PassLoad, gamma, check_fits: bool = True):
        """(physics_ms, cpu_ms, gpu_overhead_ms) [R] of gamma draft passes; see
        draft_passes_parts. check_fits False: the caller has checked the memory fit."""
        n_seqs = load.n_seqs
        g = np.asarray(gamma)
        e = self.engine
        cpu = self._draft_cpu_ms(load.cpu_seqs, g)
        if self._draft_c is None:  # n-gram / prompt lookup: host-side string matching only
            zero = np.zeros(n_seqs.shape)
            return zero, cpu, zero
        sum_ctx = load.sum_ctx
        if check_fits:
            self._check_fits(sum_ctx + n_seqs * (g + 1), n_seqs)
        # extra positions of the first draft pass: all verified ones but one, or a fixed catch-up
        # (a self-speculation draft shares the target's network, whose verification pass already
        # wrote the KV entries the draft's window takes: no catch-up)
        covers = e.draft_first_pass_covers_verified and self.draft.kind in STATEFUL_DRAFT_KINDS
        catchup = g if covers else np.asarray(e.draft_catchup_positions_per_seq)
        max_catchup = int(np.max(catchup)) if np.size(catchup) else 0
        table = self._table_ms("draft", load.max_seqs, 1 + max_catchup)
        capped = self._draft_sum_ctx(load, g)
        mid_ctx = sum_ctx + n_seqs * ((g - 1) * 0.5) if capped is None else capped
        per_pass_ms = table[:, 1].take(n_seqs) + self._attention_pnorm_ms(
            self._draft_c, n_seqs, n_seqs, 1, mid_ctx)
        physics = g * per_pass_ms
        gpu = g * launch_overhead_s(self._draft_c, per_pass_ms * 1e-3, 1, n_seqs) * 1e3
        if max_catchup:
            b = self.draft.kv_budget_tokens
            ctx0 = sum_ctx if b is None else load.capped_ctx(b, 0)
            wide = 1 + catchup
            extra = (table.ravel().take(n_seqs * table.shape[1] + wide) - table[:, 1].take(n_seqs)
                     + self._attention_pnorm_ms(self._draft_c, n_seqs, n_seqs * wide, wide, ctx0)
                     - self._attention_pnorm_ms(self._draft_c, n_seqs, n_seqs, 1, ctx0))
            gpu = gpu + np.where(g > 0, extra, 0.0)
            c = self._draft_c
            if c.cuda_graph_max_tokens:  # the first pass's S (1 + catch-up) tokens: vLLM's rule
                first = (launch_overhead_s(c, (per_pass_ms + extra) * 1e-3, wide, n_seqs)
                         - launch_overhead_s(c, per_pass_ms * 1e-3, 1, n_seqs)) * 1e3
                gpu = gpu + np.where(g > 0, first, 0.0)
        return physics, cpu, gpu

    def draft_passes_parts(self, active, gamma, context_len_tokens):
        """(physics_ms[R], overhead_ms[R]) of gamma sequential one-position draft passes.

        Pass k (k = 0..gamma-1) sees the context sum grown to C + S k (each context capped at the
        draft KV budget, if any). Every term but attention is the same in each pass (times gamma).
        Attention is linear in k in each bound, so the sum is taken in closed form as gamma x the
        pass at the mean context C + S (gamma - 1) / 2 (exact where one bound holds; the p-norm's
        curvature in k makes it a slight underestimate in the knee, < 0.1% for any gamma <= 32).
        Overhead: per-pass CPU and the catch-up pass (EngineProfile). Where the engine overlaps
        CPU with GPU for this draft kind, the CPU is booked on the target pass (target_pass_parts)
        and only the catch-up (GPU work) stays here.
        """
        return self._draft_passes_parts(PassLoad.from_masks(active, context_len_tokens), gamma)

    def _draft_passes_parts(self, load: PassLoad, gamma):
        physics, cpu, gpu = self._draft_parts(load, gamma)
        if kind_listed(self.draft.kind, self.engine.cpu_overlap_draft_kinds):
            return physics, gpu
        return physics, cpu + gpu

    def draft_passes_time(self, active, gamma, context_len_tokens):
        """float[R] ms of gamma sequential one-position draft passes (gamma: int or int[R]),
        physics + engine overhead; see draft_passes_parts."""
        physics, overhead = self.draft_passes_parts(active, gamma, context_len_tokens)
        return physics + overhead

    def draft_passes_time_totals(self, n_seqs, sum_context_tokens, gamma, draft_mid_context=None,
                                 draft_start_context=None):
        """draft_passes_time from per-pass totals (see target_pass_time_totals)."""
        load = PassLoad.from_totals(n_seqs, sum_context_tokens, draft_mid_context,
                                    draft_start_context)
        physics, overhead = self._draft_passes_parts(load, gamma)
        return physics + overhead

    def prefill_parts(self, n_prompts, prompt_tokens, context_tokens=0, network: str = "target"):
        """(physics_ms, overhead_ms) of one prefill pass: n_prompts prompts of prompt_tokens
        tokens each, after context_tokens already cached per sequence (0 for a fresh request; a
        later chunk of a chunked prefill otherwise), causal attention over the prompt, KV cache
        written, LM head on each prompt's last position only. Arrays broadcast together.
        network: "target" or "draft" (a draft model or EAGLE head prefills the same prompts; an
        n-gram draft has no pass: zeros). Overhead: the engine's per-step CPU (not overlapped)
        and, without CUDA graphs, the launch cost. Every value is 0 where n_prompts is 0.
        """
        if network not in ("target", "draft"):
            raise CostModelInputError("network", f"unknown '{network}'; allowed: target, draft")
        S, t, ctx = np.broadcast_arrays(np.asarray(n_prompts), np.asarray(prompt_tokens),
                                        np.asarray(context_tokens))
        c = self._target_c if network == "target" else self._draft_c
        if c is None:
            zero = np.zeros(S.shape)
            return zero, zero
        self._check_fits(np.asarray(S * (ctx + t), dtype=float), S)
        comp = pass_components_s(c, S, t, S * ctx, prefill=True)
        physics = (comp["layers_non_attention"] + comp["attention"] + comp["lm_head"]
                   + comp["communication"]) * 1e3
        e = self.engine
        cpu = (e.step_cpu_fixed_ms + e.step_cpu_per_seq_ms * S if network == "target"
               else e.draft_pass_cpu_fixed_ms + e.draft_pass_cpu_per_seq_ms * S)
        overhead = cpu + comp["launch"] * 1e3
        active = S > 0
        return np.where(active, physics, 0.0), np.where(active, overhead, 0.0)

    def prefill_time(self, n_prompts, prompt_tokens, context_tokens=0, network: str = "target"):
        """ms of one prefill pass, physics + engine overhead (see prefill_parts)."""
        physics, overhead = self.prefill_parts(n_prompts, prompt_tokens, context_tokens, network)
        return physics + overhead

    def step_breakdown(self, batch: int, gamma: int, context_len_tokens: int) -> StepBreakdown:
        """T_AR, T_V and gamma T_D of `batch` sequences all at `context_len_tokens`, each split
        into physics and engine overhead (MagicDec's notation; Chen et al. 2024)."""
        batch = check_int("batch", batch, 1)
        gamma = check_int("gamma", gamma, 1)
        context_len_tokens = check_int("context", context_len_tokens, 0)
        active = np.ones((1, batch), bool)
        ctx = np.full((1, batch), context_len_tokens)
        dec = self.target_pass_parts(active, 1, ctx)
        ver = self.target_pass_parts(active, gamma + 1, ctx)
        dra = self.draft_passes_parts(active, gamma, ctx)
        return StepBreakdown(
            batch=batch, gamma=gamma, context_len_tokens=context_len_tokens,
            decode_physics_ms=float(dec[0][0]), decode_overhead_ms=float(dec[1][0]),
            verify_physics_ms=float(ver[0][0]), verify_overhead_ms=float(ver[1][0]),
            draft_physics_ms=float(dra[0][0]), draft_overhead_ms=float(dra[1][0]))
