"""The Llama architecture as a plain `nn.Module` (torchtitan style: no parallelism inside).

RMSNorm -> grouped-query attention with RoPE -> RMSNorm -> SwiGLU, `n_layers` times, then a
final RMSNorm and the vocabulary projection (optionally tied to the embedding). Qwen2/2.5,
Qwen3 and Mistral are this module with `ModelArgs` fields set (args.py): q/k/v biases
(`qkv_bias`), a per-head RMSNorm of q and k applied before RoPE (`qk_norm`, as
transformers' Qwen3Attention), and a head width other than dim / n_heads.

The forward is the trainer's: `model(ids)` -> logits [B, T, V], causal, positions 0..T-1, or
explicit `positions` and a boolean `attn_mask` [B, 1, T, T] (True = may attend; left-padded
rows start at position 0 on their first real token). Decoding with a KV cache is the
engine's alone (generation/forward.py: its `SlotCache`, read through the same modules'
weights). Attention goes through `scaled_dot_product_attention` with `enable_gqa`, so K/V
are never expanded to all query heads.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .args import ModelArgs
from .rope import apply_rope, rope_inv_freq, rope_tables


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op; same arithmetic as below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Normalise in float32 and scale in the input dtype, exactly like HF LlamaRMSNorm.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=args.qkv_bias)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=args.qkv_bias)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        # Qwen3: one [head_dim] RMSNorm for every query head and one for every key head.
        self.q_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(args.head_dim, args.norm_eps) if args.qk_norm else None

    def forward(self, x, cos, sin, attn_mask):
        # Head counts come from the weights (-1), not args: under tensor parallelism this rank's
        # wq/wk/wv hold only its share of the heads (transport/tensor_parallel.py).
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, -1, self.head_dim)  # [B, T, H, hd]
        k = self.wk(x).view(B, T, -1, self.head_dim)  # [B, T, KV, hd]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, T, hd], [B, KV, T, hd]
        v = self.wv(x).view(B, T, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        gqa = k.shape[1] != q.shape[1]
        if attn_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)  # gate
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)  # down
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # up

    def forward(self, x):
        if torch.is_grad_enabled():
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        # Inference: reuse the gate buffer (same arithmetic, two fewer large allocations).
        return self.w2(F.silu(self.w1(x), inplace=True).mul_(self.w3(x)))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_dim)

    def forward(self, x, cos, sin, attn_mask):
        if torch.is_grad_enabled():
            x = x + self.attention(self.attention_norm(x), cos, sin, attn_mask)
            return x + self.feed_forward(self.ffn_norm(x))
        # Inference: accumulate the residual in place (x is this block's own buffer after the
        # first add; the embedding output is never modified because the first add allocates).
        x = x + self.attention(self.attention_norm(x), cos, sin, attn_mask)
        return x.add_(self.feed_forward(self.ffn_norm(x)))


class Llama(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        if (args.decoupled_head_dim is None and args.dim % args.n_heads) or args.n_heads % args.n_kv_heads:
            raise ValueError(f"dim={args.dim} must divide by n_heads={args.n_heads} (or head_dim be given) "
                             f"and n_heads by n_kv_heads={args.n_kv_heads}")
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self._rope_cache: dict = {}  # device -> (cos, sin); derived data, not in state_dict
        self.reset_parameters()

    def reset_parameters(self, std: float = 0.02) -> None:
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)

    def rope(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if device not in self._rope_cache:
            # Built outside inference mode even when first needed by the engine: inference
            # tensors cannot be saved for backward, and the trainer reuses this cache.
            with torch.inference_mode(False), torch.no_grad():
                inv_freq = rope_inv_freq(self.args.head_dim, self.args.rope_theta, self.args.rope_scaling)
                cos, sin = rope_tables(inv_freq, self.args.max_seq_len)
                self._rope_cache[device] = (cos.to(device), sin.to(device))
        return self._rope_cache[device]

    def forward(self, input_ids: torch.Tensor, positions: Optional[torch.Tensor] = None,
                attn_mask: Optional[torch.Tensor] = None, last_only: bool = False,
                head: Optional[Callable[[torch.Tensor, nn.Module], Any]] = None):
        """input_ids [B, T] -> logits [B, T, V] (or [B, 1, V] with `last_only`).

        positions [B, T] (default 0..T-1); attn_mask bool [B, 1, T, T] where True means "may
        attend" (default causal).
        `head(h, output)`: what to return instead of the logits, from the normed hidden
        states h [B, T, D] and the output projection; called inside this forward, so a
        wrapper's hooks (FSDP, DDP) see it (the trainer computes log-probs chunk by chunk
        there: no [B, T, V] logits, `generation.sampling.chunked_policy_logprobs`).
        """
        B, T = input_ids.shape
        cos_table, sin_table = self.rope(input_ids.device)
        if positions is None:
            if T > self.args.max_seq_len:
                raise ValueError(f"sequence length {T} > max_seq_len {self.args.max_seq_len}")
            cos, sin = cos_table[:T][None, None], sin_table[:T][None, None]  # [1, 1, T, hd]
        else:
            cos, sin = cos_table[positions][:, None], sin_table[positions][:, None]  # [B,1,T,hd]
        h = self.tok_embeddings(input_ids)
        for layer in self.layers:
            h = layer(h, cos.to(h.dtype), sin.to(h.dtype), attn_mask)
        if last_only:
            h = h[:, -1:]
        if head is not None:
            return head(self.norm(h), self.output)
        return self.output(self.norm(h)).float()

    def local_kv_heads(self) -> int:
        """KV heads this module computes: all of them, or a tensor-parallel rank's share."""
        return self.layers[0].attention.wk.weight.shape[0] // self.args.head_dim
