"""The engine's two forward passes over a slot-indexed KV cache: prefill and one decode step.

Cache layout: `SlotCache.k[layer]` is `[slots, n_kv_heads, max_len, head_dim]`; each slot holds
one sequence with no padding: its token at position p sits at index p, so a slot's filled
length is its next position. Slots are independent: a finished sequence's slot is refilled by
prefilling the next prompt into indices 0..P-1 of that slot (what lies beyond a sequence's
length is never attended to: the decode mask stops at each slot's own length).

  * `prefill(ids [n, T], lengths [n], slots [n], start=0)`: new prompts, right-padded to T,
    written into cache slots `slots`; plain causal attention, the trainer's own SDPA call (a
    real token never sees padding, which only ever follows it); returns the logits at each
    prompt's last real token. With `start`, the prompts' first `start` tokens are in those
    slots already (a prefix they share) and `ids` are the rest.
  * `decode(tokens [B], positions [B], span)`: one token for each of slots 0..B-1, written at
    each slot's own position; attention over indices 0..span-1 with each slot masked beyond
    its position.
Decode attention is written out as matmuls (`_attend`); a GQA group's query heads share one
read of the group's K/V.

The model's parameters are read through `EngineWeights` (merged projections, fused.py); the
norms (Qwen3's per-head q/k norms included, applied before RoPE as in the model), embedding
and RoPE tables are the model's own, so the arithmetic is the trainer's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..models.rope import apply_rope
from . import cpu_gemm


class SlotCache:
    def __init__(self, model, slots: int, max_len: int, dtype: torch.dtype | None = None):
        """`dtype`: the compute dtype, when it is not the weights' (an FSDP2 model gathers its
        shards in its mixed-precision dtype)."""
        a, w = model.args, model.tok_embeddings.weight
        shape = (slots, model.local_kv_heads(), max_len, a.head_dim)  # a TP rank's share of heads
        dtype = dtype or w.dtype
        self.k = [torch.zeros(shape, dtype=dtype, device=w.device) for _ in range(a.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=w.device) for _ in range(a.n_layers)]
        self.slots, self.max_len = slots, max_len

    def fits(self, model, slots: int, max_len: int) -> bool:
        w = model.tok_embeddings.weight
        return (self.slots >= slots and self.max_len >= max_len and self.k[0].dtype == w.dtype
                and self.k[0].device == w.device)

    def move(self, src: torch.Tensor, dst: torch.Tensor, filled: int) -> None:
        """Copy slots `src` [n] to slots `dst` [n] (first `filled` indices)."""
        for buf in self.k + self.v:
            buf[dst, :, :filled] = buf[src, :, :filled]  # advanced index reads before writing


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd) + mask) v per KV group: q [B, KV, R, hd] (R = a group's query
    heads x tokens, as rows), k/v [B, KV, S, hd] read in place from the cache, additive mask
    broadcastable to [B, KV, R, S] -> [B, KV, R, hd].

    Folding a group's heads into query rows means K/V are read once per group and never
    expanded or copied. Plain matmuls: at decode sizes they beat
    `scaled_dot_product_attention`'s CPU kernel (measured: 64 rows, 4 heads, 40 keys read in
    place from a longer cache, 1 thread: 137 us vs 448 us). On GPUs and in half precision the
    fused kernel is used instead (it accumulates the softmax in float32)."""
    if q.is_cuda or q.dtype != torch.float32:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = torch.matmul(q * q.shape[-1] ** -0.5, k.transpose(-1, -2))  # [B, KV, R, S]
    return torch.matmul(scores.add_(mask).softmax(dim=-1), v)


def _heads(att) -> tuple[int, int, int]:
    """(query heads, KV heads, head_dim) this module computes: under tensor parallelism a
    rank's wq/wk hold only its share of the heads, so the counts come from the weights."""
    hd = att.head_dim
    return att.wq.weight.shape[0] // hd, att.wk.weight.shape[0] // hd, hd


def _ffn(proj, i: int, h: torch.Tensor, layer) -> torch.Tensor:
    gate, up = proj[f"{i}.w13"](layer.ffn_norm(h)).chunk(2, dim=-1)
    return proj[f"{i}.w2"](F.silu(gate).mul_(up))


def _head(model, proj, h: torch.Tensor) -> torch.Tensor:
    """The output head's logits in float32. A tied head (SmolLM2, Llama-3.2) is the embedding
    matrix itself, never copied into `proj`; it still takes the faster CPU kernel
    (cpu_gemm.py: the 49k-vocabulary head ran 33 vs 20 GFLOP/s) unless hooks wrap it."""
    h = model.norm(h)
    head = model.output
    if "output" in proj:
        out = proj["output"](h)
    elif type(head) is torch.nn.Linear and not (head._forward_hooks or head._forward_pre_hooks):
        out = cpu_gemm.linear(h, head.weight, head.bias)
    else:
        out = head(h)
    return out.float()


def prefill(model, proj, cache: SlotCache, ids: torch.Tensor, lengths: torch.Tensor,
            slots: torch.Tensor, start: int = 0) -> torch.Tensor:
    """ids [n, T] right-padded, lengths [n], slots [n] -> logits [n, V] at each last real token.

    `start` > 0: the ids are the rest of prompts whose first `start` tokens' K/V every slot
    holds already (a shared prefix, prefill_once.py): they take positions start.., and attend
    to those cached keys and causally to each other."""
    n, T = ids.shape
    cos, sin = (t[start:start + T][None, None] for t in model.rope(ids.device))  # [1, 1, T, hd]
    h = model.tok_embeddings(ids)  # [n, T, D]
    cos, sin = cos.to(h.dtype), sin.to(h.dtype)
    # query i (position start + i) sees keys 0..start + i
    visible = (torch.arange(start + T, device=ids.device)[None, :]
               <= torch.arange(start, start + T, device=ids.device)[:, None]) if start else None
    for i, layer in enumerate(model.layers):
        att = layer.attention
        H, KV, hd = _heads(att)
        q, k, v = proj[f"{i}.qkv"](layer.attention_norm(h)).split([H * hd, KV * hd, KV * hd], dim=-1)
        q, k = q.view(n, T, H, hd), k.view(n, T, KV, hd)
        if att.q_norm is not None:
            q, k = att.q_norm(q), att.k_norm(k)
        q = apply_rope(q.transpose(1, 2), cos, sin)  # [n, H, T, hd]
        k = apply_rope(k.transpose(1, 2), cos, sin)  # [n, KV, T, hd]
        v = v.view(n, T, KV, hd).transpose(1, 2)
        cache.k[i][slots, :, start:start + T] = k
        cache.v[i][slots, :, start:start + T] = v
        if start:
            k, v = cache.k[i][slots, :, :start + T], cache.v[i][slots, :, :start + T]  # [n, KV, start+T, hd]
        # The trainer's own attention call (prefill is not per-step work): μ matches its π.
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, is_causal=not start and T > 1,
                                             enable_gqa=KV != H)
        h = h + proj[f"{i}.wo"](out.transpose(1, 2).reshape(n, T, H * hd))
        h = h.add_(_ffn(proj, i, h, layer))
    last = h[torch.arange(n, device=h.device), lengths - 1]  # [n, D]
    return _head(model, proj, last)


def _rope_heads(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE on x [B, N, hd] (the query and key heads of one decode step together):
    x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1) written as (x2, x1)*(-sin, sin),
    so one step's q and k take 4 ops instead of apply_rope's 6 per tensor (same products)."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return torch.addcmul(x * cos, swapped, sin_signed)


def decode(model, proj, cache: SlotCache, tokens: torch.Tensor, positions: torch.Tensor,
           span: int) -> torch.Tensor:
    """tokens [B] at positions [B] for slots 0..B-1 -> logits [B, V]; span > max(positions).

    Per step, not per layer: the RoPE rows, the mask and the flat cache index every layer
    writes its new K/V at (`index_copy_` into a [slots*KV*max_len, hd] view: one kernel, no
    advanced-indexing machinery)."""
    B = tokens.shape[0]
    cos_t, sin_t = model.rope(tokens.device)
    h = model.tok_embeddings(tokens)[:, None]  # [B, 1, D]
    cos = cos_t[positions][:, None].to(h.dtype)  # [B, 1, hd]
    sin = sin_t[positions][:, None].to(h.dtype)
    half = cos.shape[-1] // 2
    sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    hidden = torch.arange(span, device=tokens.device)[None, :] > positions[:, None]  # [B, S]
    mask = torch.zeros(B, 1, 1, span, dtype=h.dtype, device=h.device).masked_fill_(
        hidden[:, None, None], float("-inf"))
    H, KV, hd = _heads(model.layers[0].attention)
    L = cache.max_len
    heads = torch.arange(KV, device=tokens.device)
    at = ((torch.arange(B, device=tokens.device)[:, None] * KV + heads) * L
          + positions[:, None]).reshape(-1)  # [B*KV] row of (slot, kv head, position)
    for i, layer in enumerate(model.layers):
        qkv = proj[f"{i}.qkv"](layer.attention_norm(h)).view(B, H + 2 * KV, hd)
        qk = qkv[:, :H + KV]
        if layer.attention.q_norm is not None:
            qk = torch.cat((layer.attention.q_norm(qk[:, :H]), layer.attention.k_norm(qk[:, H:])), dim=1)
        qk = _rope_heads(qk, cos, sin_signed)  # [B, H+KV, hd]
        cache.k[i].view(-1, hd).index_copy_(0, at, qk[:, H:].reshape(B * KV, hd))
        cache.v[i].view(-1, hd).index_copy_(0, at, qkv[:, H + KV:].reshape(B * KV, hd))
        keys, values = cache.k[i][:B, :, :span], cache.v[i][:B, :, :span]  # [B, KV, S, hd]
        out = _attend(qk[:, :H].reshape(B, KV, H // KV, hd), keys, values, mask)  # [B, KV, G, hd]
        h = h + proj[f"{i}.wo"](out.reshape(B, 1, H * hd))
        h = h.add_(_ffn(proj, i, h, layer))
    return _head(model, proj, h[:, 0])
