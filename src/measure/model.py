"""The step `measure` times: a Llama-architecture decoder with random BF16 weights.

The shapes come from a model preset (src/presets/models.toml, `ModelSpec`); the values are random
(normal, std 0.02), since the time of a dense GEMM or attention kernel does not depend on them.
Plain PyTorch, one kernel per operation, nothing fused beyond cuBLAS GEMMs and the attention
kernel; this is the implementation the profiles `pytorch-graphs` / `pytorch-eager` describe.

A decode or verification step (`forward`) of `batch` sequences, each with `context` tokens
already in the KV cache and `positions` new tokens (1 = decode, gamma + 1 = verification):

    x = embedding[token ids]                                   [B*P, h]
    per layer:
        a = RMSNorm(x) (FP32 statistics, as Llama's reference code)
        q, k, v = split(a @ W_qkv^T)                           one fused QKV GEMM
        q, k = rotary([q, k])                                  positions context .. context+P-1
        K_cache[:, :, context:], V_cache[:, :, context:] = k, v  KV-cache write
        o = SDPA(q folded, K_cache, V_cache)                   see below
        x = x + o @ W_o^T
        [g, u] = RMSNorm(x) @ W_gate_up^T                      one fused gate/up GEMM
        x = x + (SiLU(g) * u) @ W_down^T
    logits = RMSNorm(x) @ W_lm_head^T                           every position: B*P x vocab
    argmax(logits)

Attention: grouped-query attention is folded into the query length. The G = heads / KV heads
query heads sharing a KV head become G x P query rows of that KV head, so the kernel sees
q [B, KV heads, P*G, d] against K, V [B, KV heads, context + P, d] and reads each KV head once.
The new positions attend to all context + P keys without a causal mask among themselves (the same
bytes moved; FLOPs differ by at most P / context). The backend is whatever
`torch.nn.attention.sdpa_kernel` allows around the call (flash, cudnn, ...).

`attention_only`: the step with each layer reduced to its KV-cache write and attention call (Q,
K, V fixed random inputs; no GEMMs, norms, rotary or residuals in the layers); the embedding,
final RMSNorm, LM head and argmax stay. forward minus attention_only approximates the layers'
non-attention work (what vidur calls forward_ms_non_attention).

`prefill`: `batch` prompts of P tokens, empty cache. As forward, except that attention is causal
over the prompt with K and V repeated to the query heads (the causal mask cannot fold GQA into
the query length), the prompt's K and V are written to the cache, and the final RMSNorm, LM head
and argmax run on the last prompt position only, as serving engines do.

The KV cache is one preallocated buffer per model, filled with random values once; each
configuration views its front as [layers, 2 (K, V), B, KV heads, context + P, d].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from src.costmodel import ModelSpec

DTYPE = torch.bfloat16
INIT_STD = 0.02  # scale of the random weights and cache contents (values do not affect timing)
RMS_EPS = 1e-5  # Llama 3 rms_norm_eps (config.json)
ROPE_THETA = 500000.0  # Llama 3 rope_theta (config.json); scaling is irrelevant to timing


@dataclass(frozen=True)
class Weights:
    """Every weight of the model, per-layer weights stacked along a leading layer axis."""

    embed: torch.Tensor  # [vocab, h]
    ln1: torch.Tensor  # [L, h]
    qkv: torch.Tensor  # [L, q + 2 kv, h]
    o: torch.Tensor  # [L, h, q]
    ln2: torch.Tensor  # [L, h]
    gate_up: torch.Tensor  # [L, 2 I, h]
    down: torch.Tensor  # [L, h, I]
    norm: torch.Tensor  # [h]
    lm_head: torch.Tensor  # [vocab, h]; the embedding itself when the preset ties them


def random_weights(spec: ModelSpec, device: torch.device, seed: int) -> Weights:
    """Random BF16 weights of `spec`'s shapes (normal, std INIT_STD; norm weights 1)."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape):
        return torch.empty(shape, dtype=DTYPE, device=device).normal_(0.0, INIT_STD, generator=gen)

    L, h, inter = spec.n_layers, spec.hidden_size, spec.intermediate_size
    q, kv = spec.q_width, spec.kv_width
    embed = rand(spec.vocab_size, h)
    return Weights(
        embed=embed,
        ln1=torch.ones(L, h, dtype=DTYPE, device=device),
        qkv=rand(L, q + 2 * kv, h),
        o=rand(L, h, q),
        ln2=torch.ones(L, h, dtype=DTYPE, device=device),
        gate_up=rand(L, 2 * inter, h),
        down=rand(L, h, inter),
        norm=torch.ones(h, dtype=DTYPE, device=device),
        lm_head=embed if spec.tied_embeddings else rand(spec.vocab_size, h),
    )


class KVCache:
    """One preallocated BF16 buffer; `view` lays a configuration's cache over its front."""

    def __init__(self, spec: ModelSpec, n_bytes: int, device: torch.device, seed: int):
        self.spec = spec
        n_values = max(n_bytes // 2, 1)
        gen = torch.Generator(device=device).manual_seed(seed + 1)
        self.buffer = torch.empty(n_values, dtype=DTYPE, device=device)
        self.buffer.normal_(0.0, INIT_STD, generator=gen)

    @property
    def n_bytes(self) -> int:
        return self.buffer.numel() * 2

    def view(self, batch: int, seq: int) -> torch.Tensor:
        """[layers, 2, batch, KV heads, seq, head dim], contiguous."""
        s = self.spec
        shape = (s.n_layers, 2, batch, s.n_kv_heads, seq, s.head_dim)
        n = s.n_layers * 2 * batch * s.n_kv_heads * seq * s.head_dim
        if n > self.buffer.numel():
            raise ValueError(f"KV cache of {n * 2} bytes asked of a {self.n_bytes}-byte buffer")
        return self.buffer[:n].view(shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps), statistics in FP32 (unfused: several kernels)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + RMS_EPS)
    return weight * xf.to(x.dtype)


def rope_tables(spec: ModelSpec, start: int, count: int, device: torch.device):
    """cos, sin [count, 1, head_dim] for positions start .. start + count - 1."""
    d = spec.head_dim
    inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d)
    t = torch.arange(start, start + count, dtype=torch.float32, device=device)
    angles = torch.outer(t, inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(DTYPE)[:, None, :], angles.sin().to(DTYPE)[:, None, :]


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, P, heads, d] rotated: x cos + rotate_half(x) sin (unfused)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _qkv(w: Weights, spec: ModelSpec, layer: int, x: torch.Tensor, batch: int, positions: int,
         cos, sin):
    """RMSNorm, the fused QKV GEMM, and rotary on the query and key heads together (one set of
    elementwise kernels for both: they share the positions). q [B, P, heads, d]; k, v [B, P, KV
    heads, d] (views into the rotated and projected tensors)."""
    a = rms_norm(x, w.ln1[layer])
    qkv = a @ w.qkv[layer].t()
    qk_width = spec.q_width + spec.kv_width
    qk = rotary(qkv[:, :qk_width].view(batch, positions, spec.n_heads + spec.n_kv_heads,
                                       spec.head_dim), cos, sin)
    q, k = qk.split([spec.n_heads, spec.n_kv_heads], dim=2)
    v = qkv[:, qk_width:].view(batch, positions, spec.n_kv_heads, spec.head_dim)
    return q, k, v


def _mlp_and_residuals(w: Weights, layer: int, x: torch.Tensor, attn: torch.Tensor):
    x = x + attn @ w.o[layer].t()
    g, u = (rms_norm(x, w.ln2[layer]) @ w.gate_up[layer].t()).chunk(2, dim=-1)
    return x + (F.silu(g) * u) @ w.down[layer].t()


def fold_gqa(q: torch.Tensor, spec: ModelSpec) -> torch.Tensor:
    """q [B, P, heads, d] -> [B, KV heads, P * G, d]: the G query heads of each KV head become
    query rows (head h uses KV head h // G, as in Llama's repeat_kv)."""
    b, p = q.shape[:2]
    g = spec.n_heads // spec.n_kv_heads
    q = q.view(b, p, spec.n_kv_heads, g, spec.head_dim).transpose(1, 2)
    return q.reshape(b, spec.n_kv_heads, p * g, spec.head_dim)


def unfold_gqa(o: torch.Tensor, spec: ModelSpec, batch: int, positions: int) -> torch.Tensor:
    """Inverse of fold_gqa on the attention output, flattened to [B * P, heads * d]."""
    g = spec.n_heads // spec.n_kv_heads
    o = o.view(batch, spec.n_kv_heads, positions, g, spec.head_dim).transpose(1, 2)
    return o.reshape(batch * positions, spec.q_width)


def forward_step(w: Weights, spec: ModelSpec, cache: KVCache, batch: int, positions: int,
                 context: int, device: torch.device, seed: int) -> Callable[[], torch.Tensor]:
    """The decode/verification step (module docstring) as a closure over its static inputs."""
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, spec.vocab_size, (batch * positions,), device=device, generator=gen)
    cos, sin = rope_tables(spec, context, positions, device)
    kv = cache.view(batch, context + positions)

    def step() -> torch.Tensor:
        x = w.embed[ids]
        for layer in range(spec.n_layers):
            q, k, v = _qkv(w, spec, layer, x, batch, positions, cos, sin)
            k_cache, v_cache = kv[layer, 0], kv[layer, 1]
            k_cache[:, :, context:].copy_(k.transpose(1, 2))
            v_cache[:, :, context:].copy_(v.transpose(1, 2))
            o = F.scaled_dot_product_attention(fold_gqa(q, spec), k_cache, v_cache)
            x = _mlp_and_residuals(w, layer, x, unfold_gqa(o, spec, batch, positions))
        logits = rms_norm(x, w.norm) @ w.lm_head.t()
        return logits.argmax(dim=-1)

    return step


def attention_only_step(w: Weights, spec: ModelSpec, cache: KVCache, batch: int,
                        positions: int, context: int, device: torch.device, seed: int
                        ) -> Callable[[], torch.Tensor]:
    """The step with each layer reduced to its KV-cache write and attention call, on fixed random
    Q, K, V; embedding, final norm, LM head and argmax as in forward_step."""
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, spec.vocab_size, (batch * positions,), device=device, generator=gen)
    q = torch.empty(batch, positions, spec.n_heads, spec.head_dim, dtype=DTYPE, device=device)
    k = torch.empty(batch, positions, spec.n_kv_heads, spec.head_dim, dtype=DTYPE, device=device)
    v = torch.empty_like(k)
    for t in (q, k, v):
        t.normal_(0.0, 1.0, generator=gen)
    q_folded = fold_gqa(q, spec)
    kv = cache.view(batch, context + positions)

    def step() -> torch.Tensor:
        x = w.embed[ids]
        for layer in range(spec.n_layers):
            k_cache, v_cache = kv[layer, 0], kv[layer, 1]
            k_cache[:, :, context:].copy_(k.transpose(1, 2))
            v_cache[:, :, context:].copy_(v.transpose(1, 2))
            F.scaled_dot_product_attention(q_folded, k_cache, v_cache)
        logits = rms_norm(x, w.norm) @ w.lm_head.t()
        return logits.argmax(dim=-1)

    return step


def prefill_step(w: Weights, spec: ModelSpec, cache: KVCache, batch: int, prompt_len: int,
                 device: torch.device, seed: int) -> Callable[[], torch.Tensor]:
    """Prefill of `batch` prompts of `prompt_len` tokens (module docstring)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, spec.vocab_size, (batch * prompt_len,), device=device, generator=gen)
    cos, sin = rope_tables(spec, 0, prompt_len, device)
    kv = cache.view(batch, prompt_len)
    group = spec.n_heads // spec.n_kv_heads

    def step() -> torch.Tensor:
        x = w.embed[ids]
        for layer in range(spec.n_layers):
            q, k, v = _qkv(w, spec, layer, x, batch, prompt_len, cos, sin)
            k, v = k.transpose(1, 2), v.transpose(1, 2)  # [B, KV heads, P, d]
            kv[layer, 0].copy_(k)
            kv[layer, 1].copy_(v)
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.repeat_interleave(group, dim=1),
                v.repeat_interleave(group, dim=1), is_causal=True)
            x = _mlp_and_residuals(w, layer, x,
                                   o.transpose(1, 2).reshape(batch * prompt_len, spec.q_width))
        last = x.view(batch, prompt_len, spec.hidden_size)[:, -1]
        logits = rms_norm(last, w.norm) @ w.lm_head.t()
        return logits.argmax(dim=-1)

    return step


# Operations that only relabel memory (no kernel) although the dispatcher does not mark them views
_NO_KERNEL_OPS = frozenset({"aten._unsafe_view.default", "aten.alias.default",
                            "aten.detach.default"})


def count_kernels(step: Callable[[], torch.Tensor]) -> int:
    """ATen operations one call of `step` dispatches that launch a kernel (views excluded),
    counted with a TorchDispatchMode; a cuBLAS GEMM or an attention call counts as one."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not func.is_view and str(func) not in _NO_KERNEL_OPS:
                Counter.n += 1
            return func(*args, **(kwargs or {}))

    with Counter():
        step()
    return Counter.n


def kernels_per_step(spec: ModelSpec, what: str, device: torch.device) -> dict[str, int]:
    """{"per_layer", "fixed"} kernel counts of a `what` step of this implementation, from steps
    of 1 and 2 layers with the preset's head layout (the count does not depend on sizes)."""
    from dataclasses import replace

    from src.measure.plan import tiny_spec

    counts = []
    for layers in (1, 2):
        small = replace(tiny_spec(spec), n_layers=layers)
        cache = KVCache(small, 2 * layers * 2 * small.kv_width * 8, device, seed=0)  # 8 slots
        w = random_weights(small, device, seed=0)
        if what == "attention_only":
            step = attention_only_step(w, small, cache, 1, 2, 4, device, seed=0)
        elif what == "prefill":
            step = prefill_step(w, small, cache, 1, 6, device, seed=0)
        else:
            step = forward_step(w, small, cache, 1, 2, 4, device, seed=0)
        counts.append(count_kernels(step))
    return {"per_layer": counts[1] - counts[0], "fixed": 2 * counts[0] - counts[1]}
