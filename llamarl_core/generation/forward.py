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
  * `step(decode_rows=..., prefill_rows=...)`: both in one forward, the way continuous
    batching admits a prompt while others decode: the decode rows and the prompts' rows are
    stacked for every projection GEMM (one pass over the weights), attention is per kind.
    `prefill` and `decode` are `step` with one kind.
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


def _rope_heads(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """RoPE on x [B, N, hd] (the query and key heads of one decode step together):
    x*cos + rotate_half(x)*sin with rotate_half(x) = (-x2, x1) written as (x2, x1)*(-sin, sin),
    so one step's q and k take 4 ops instead of apply_rope's 6 per tensor (same products)."""
    half = x.shape[-1] // 2
    swapped = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    return torch.addcmul(x * cos, swapped, sin_signed)


def prefill(model, proj, cache: SlotCache, ids: torch.Tensor, lengths: torch.Tensor,
            slots: torch.Tensor, start: int = 0) -> torch.Tensor:
    """ids [n, T] right-padded, lengths [n], slots [n] -> logits [n, V] at each last real token.

    `start` > 0: the ids are the rest of prompts whose first `start` tokens' K/V every slot
    holds already (a shared prefix, prefill_once.py): they take positions start.., and attend
    to those cached keys and causally to each other."""
    return step(model, proj, cache, prefill_rows=(ids, lengths, slots, start))[1]


def decode(model, proj, cache: SlotCache, tokens: torch.Tensor, positions: torch.Tensor,
           span: int) -> torch.Tensor:
    """tokens [B] at positions [B] for slots 0..B-1 -> logits [B, V]; span > max(positions)."""
    return step(model, proj, cache, decode_rows=(tokens, positions, span))[0]


def step(model, proj, cache: SlotCache, decode_rows=None, prefill_rows=None):
    """One forward over decode rows and prefill rows together -> (decode logits [B, V] or None,
    prefill logits [n, V] or None).

    decode_rows = (tokens [B], positions [B], span): one token for each of slots 0..B-1.
    prefill_rows = (ids [n, T], lengths [n], slots [n], start): new prompts into `slots`.

    Both kinds share every projection GEMM (their rows are stacked: B + n*T rows), so a prompt
    admitted while others decode costs its rows, not a second pass over the weights
    (continuous batching's refill joins the decode step, scheduler.py); only attention is
    per kind. Within each layer the decode rows write their K/V first, then the prefill rows,
    so a free slot's scratch write never lands over a prompt prefilled into it. Either kind
    alone is `decode` / `prefill`, the same arithmetic."""
    ids = [decode_rows[0]] if decode_rows is not None else []
    ids += [prefill_rows[0].reshape(-1)] if prefill_rows is not None else []
    h = model.tok_embeddings(ids[0] if len(ids) == 1 else torch.cat(ids))  # [B + n*T, D]
    dec = _decode_setup(model, cache, *decode_rows, h.dtype) if decode_rows is not None else None
    pre = _prefill_setup(model, *prefill_rows, h.dtype) if prefill_rows is not None else None
    B = dec["B"] if dec else 0
    H, KV, hd = _heads(model.layers[0].attention)
    for i, layer in enumerate(model.layers):
        qkv = proj[f"{i}.qkv"](layer.attention_norm(h))  # [M, (H + 2 KV) hd]
        outs = []
        if dec is not None:
            outs.append(_decode_attention(i, layer.attention, qkv[:B], cache, dec, H, KV, hd))
        if pre is not None:
            outs.append(_prefill_attention(i, layer.attention, qkv[B:], cache, pre, H, KV, hd))
        h = h + proj[f"{i}.wo"](outs[0] if len(outs) == 1 else torch.cat(outs))
        h = h.add_(_ffn(proj, i, h, layer))
    picked = h[:B]  # the decode rows, then each prompt's last token
    if pre is not None:
        n, T = pre["ids"].shape
        last = h[B + torch.arange(n, device=h.device) * T + pre["lengths"] - 1]
        picked = last if dec is None else torch.cat((picked, last))
    logits = _head(model, proj, picked)  # [B + n, V]
    return (logits[:B] if dec is not None else None), (logits[B:] if pre is not None else None)


def _decode_setup(model, cache: SlotCache, tokens, positions, span, dtype) -> dict:
    """Per step, not per layer: the RoPE rows, the mask and the flat cache index every layer
    writes its new K/V at (`index_copy_` into a [slots*KV*max_len, hd] view: one kernel, no
    advanced-indexing machinery)."""
    B = tokens.shape[0]
    cos_t, sin_t = model.rope(tokens.device)
    cos = cos_t[positions][:, None].to(dtype)  # [B, 1, hd]
    sin = sin_t[positions][:, None].to(dtype)
    half = cos.shape[-1] // 2
    sin_signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    hidden = torch.arange(span, device=tokens.device)[None, :] > positions[:, None]  # [B, S]
    mask = torch.zeros(B, 1, 1, span, dtype=dtype, device=tokens.device).masked_fill_(
        hidden[:, None, None], float("-inf"))
    _, KV, _ = _heads(model.layers[0].attention)
    heads = torch.arange(KV, device=tokens.device)
    at = ((torch.arange(B, device=tokens.device)[:, None] * KV + heads) * cache.max_len
          + positions[:, None]).reshape(-1)  # [B*KV] row of (slot, kv head, position)
    return {"tokens": tokens, "B": B, "span": span, "cos": cos, "sin_signed": sin_signed,
            "mask": mask, "at": at}


def _decode_attention(i, att, qkv, cache: SlotCache, d: dict, H: int, KV: int, hd: int):
    """qkv [B, (H + 2 KV) hd] -> attention output [B, H hd] (K/V written at each position)."""
    B, span = d["B"], d["span"]
    qkv = qkv.view(B, H + 2 * KV, hd)
    qk = qkv[:, :H + KV]
    if att.q_norm is not None:
        qk = torch.cat((att.q_norm(qk[:, :H]), att.k_norm(qk[:, H:])), dim=1)
    qk = _rope_heads(qk, d["cos"], d["sin_signed"])  # [B, H+KV, hd]
    cache.k[i].view(-1, hd).index_copy_(0, d["at"], qk[:, H:].reshape(B * KV, hd))
    cache.v[i].view(-1, hd).index_copy_(0, d["at"], qkv[:, H + KV:].reshape(B * KV, hd))
    keys, values = cache.k[i][:B, :, :span], cache.v[i][:B, :, :span]  # [B, KV, S, hd]
    out = _attend(qk[:, :H].reshape(B, KV, H // KV, hd), keys, values, d["mask"])  # [B, KV, G, hd]
    return out.reshape(B, H * hd)


def _prefill_setup(model, ids, lengths, slots, start, dtype) -> dict:
    T = ids.shape[1]
    cos, sin = (t[start:start + T][None, None].to(dtype) for t in model.rope(ids.device))  # [1, 1, T, hd]
    # query i (position start + i) sees keys 0..start + i
    visible = (torch.arange(start + T, device=ids.device)[None, :]
               <= torch.arange(start, start + T, device=ids.device)[:, None]) if start else None
    return {"ids": ids, "lengths": lengths, "slots": slots, "start": start,
            "cos": cos, "sin": sin, "visible": visible}


def _prefill_attention(i, att, qkv, cache: SlotCache, p: dict, H: int, KV: int, hd: int):
    """qkv [n*T, (H + 2 KV) hd] -> attention output [n*T, H hd] (K/V written into the slots)."""
    n, T = p["ids"].shape
    start, slots = p["start"], p["slots"]
    q, k, v = qkv.view(n, T, -1).split([H * hd, KV * hd, KV * hd], dim=-1)
    q, k = q.view(n, T, H, hd), k.view(n, T, KV, hd)
    if att.q_norm is not None:
        q, k = att.q_norm(q), att.k_norm(k)
    q = apply_rope(q.transpose(1, 2), p["cos"], p["sin"])  # [n, H, T, hd]
    k = apply_rope(k.transpose(1, 2), p["cos"], p["sin"])  # [n, KV, T, hd]
    v = v.view(n, T, KV, hd).transpose(1, 2)
    cache.k[i][slots, :, start:start + T] = k
    cache.v[i][slots, :, start:start + T] = v
    if start:
        k, v = cache.k[i][slots, :, :start + T], cache.v[i][slots, :, :start + T]  # [n, KV, start+T, hd]
    # The trainer's own attention call (prefill is not per-step work): μ matches its π.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=p["visible"], is_causal=not start and T > 1,
                                         enable_gqa=KV != H)
    return out.transpose(1, 2).reshape(n * T, H * hd)
