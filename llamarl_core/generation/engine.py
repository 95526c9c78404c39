"""Batched KV-cache generation engine in plain PyTorch.

Layout of one chunk (B prompts, longest P, N new tokens), cache slots 0..P+N-1:

    slot:    0 1 2 3 | 4 5 6 ...
    row 0:   p p a b | x y z        (prompt "ab", left-padded by 2)
    row 1:   a b c d | x y z
    position 0 0 0 1 | 2 3 4        (row 0: each row's first real token is position 0)

Prompts are left-padded so every row writes its new token into the same cache slot P+s at
decode step s: one slice copy per layer, no per-row indexing. Positions are per row (slot
minus the row's padding), so row i sees exactly the positions the trainer gives it in its
right-padded layout. An additive mask hides each row's padding slots; padding queries in
prefill attend to themselves only (no NaN rows).

Speed: the cache is preallocated once and reused across calls, decode is one model call +
one sampling call per step under `inference_mode`, sampling never syncs with the host, and
finished rows are checked every `check_every` steps (every step on CPU, where a check is
free). On CPU the linears run on a transposed weight snapshot taken at the start of every
call (weights.py). Weights are re-read at every call, so in-place weight swaps need no
notification; only quantized copies persist and are rebuilt by `refresh_weights()`.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..models.llama import KVCache, Llama
from .params import Completion, SamplingParams
from .quant import quantize_model
from .sampling import sample_next
from .stops import first_stop, truncate_at_stop_string
from .weights import attached, transposed_snapshot


class GenerationEngine:
    def __init__(self, model: Llama, tokenizer, max_batch_size: int = 64,
                 max_seq_len: Optional[int] = None, quantization: str = "none",
                 token_sync: Optional[Callable[[torch.Tensor], torch.Tensor]] = None):
        if quantization not in ("none", "int8", "fp8"):
            raise ValueError(f"quantization must be 'none', 'int8' or 'fp8', got {quantization!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model, self.tokenizer = model, tokenizer
        self.max_batch_size = max_batch_size
        self.max_seq_len = min(max_seq_len or model.args.max_seq_len, model.args.max_seq_len)
        self.quantization = quantization
        # Tensor parallelism: every rank of a replica must take the same token at every step
        # (their KV caches, stop decisions and step counts must agree). `token_sync` (built in
        # transport/tensor_parallel.py) returns TP rank 0's sampled tokens on every rank.
        self.token_sync = token_sync
        self._quantized: dict = {}
        self._cache: Optional[KVCache] = None
        self.refresh_weights()

    @property
    def device(self) -> torch.device:
        return self.model.tok_embeddings.weight.device

    def refresh_weights(self) -> None:
        """Rebuild the quantized weight copies after an in-place weight swap (no-op for 'none')."""
        if self.quantization != "none":
            self._quantized = quantize_model(self.model, self.quantization)

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 seed: Optional[int] = None) -> list[Completion]:
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {i} is empty; give at least one token (e.g. BOS)")
            if len(prompt) >= self.max_seq_len:
                raise ValueError(f"prompt {i} has {len(prompt)} tokens; max_seq_len is {self.max_seq_len}")
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), attached(self.model, self._linear_overrides()):
                out: list[Completion] = []
                for start in range(0, len(prompts), self.max_batch_size):
                    chunk = prompts[start:start + self.max_batch_size]
                    out.extend(self._generate_chunk(chunk, params, generator))
                return out
        finally:
            self.model.train(was_training)

    def _linear_overrides(self) -> dict:
        """Quantized copies (kept until refresh_weights) + a fresh transposed snapshot on CPU."""
        overrides = dict(self._quantized)
        if self.device.type == "cpu":
            overrides.update(transposed_snapshot(self.model, skip=set(overrides)))
        return overrides

    def _kv_cache(self, batch: int, length: int) -> KVCache:
        dtype = self.model.tok_embeddings.weight.dtype
        cache = self._cache
        if (cache is None or cache.batch_size < batch or cache.max_len < length
                or cache.k[0].dtype != dtype or cache.k[0].device != self.device):
            size = max(batch, cache.batch_size if cache else 0)
            self._cache = cache = self.model.new_cache(size, max(length, cache.max_len if cache else 0))
        return cache

    def _left_padded_inputs(self, prompts, lengths: torch.Tensor, P: int, N: int):
        """ids and positions [B, P], additive prefill mask [B, 1, P, P], decode mask [B, 1, 1, P+N]."""
        device, B = self.device, len(prompts)
        ids = torch.full((B, P), self.tokenizer.pad_id, dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, P - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        pad_count = P - lengths  # [B]
        slots = torch.arange(P + N, device=device)  # [S]
        valid = slots[None, :] >= pad_count[:, None]  # [B, S]: False on padding slots
        dtype = self.model.tok_embeddings.weight.dtype
        neg_inf = torch.finfo(dtype).min
        # Prefill: causal, real keys only; padding queries see themselves (no all-masked rows).
        causal = slots[:P, None] >= slots[None, :P]  # [P, P]
        allowed = (causal[None] & valid[:, None, :P]) | torch.eye(P, dtype=torch.bool, device=device)
        prefill_mask = torch.zeros(B, 1, P, P, dtype=dtype, device=device).masked_fill(
            ~allowed[:, None], neg_inf)
        decode_mask = torch.zeros(B, 1, 1, P + N, dtype=dtype, device=device).masked_fill(
            ~valid[:, None, None], neg_inf)
        positions = (slots[None, :P] - pad_count[:, None]).clamp(min=0)  # [B, P]
        return ids.to(device), positions, prefill_mask, decode_mask

    def _generate_chunk(self, prompts, params: SamplingParams, generator) -> list[Completion]:
        device, model, pad = self.device, self.model, self.tokenizer.pad_id
        B = len(prompts)
        lengths = torch.tensor([len(p) for p in prompts], device=device)  # [B]
        P = int(lengths.max())
        N = min(params.max_new_tokens, self.max_seq_len - P)
        ids, positions, prefill_mask, decode_mask = self._left_padded_inputs(prompts, lengths, P, N)
        cache = self._kv_cache(B, P + N)
        logits = model(ids, positions=positions, cache=cache, cache_start=0,
                       attn_mask=prefill_mask, last_only=True)[:, 0]  # [B, V]
        stop_ids = list(params.stop_token_ids)
        if not params.ignore_eos:
            stop_ids += list(getattr(self.tokenizer, "eos_ids", (self.tokenizer.eos_id,)))
        stop_ids_t = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
        tokens = torch.full((B, N), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros(B, N, dtype=torch.float32, device=device)
        # The decode batch holds only the `rows` still running once at most half of it is
        # (compaction): RL completions end at very different lengths, and finished rows
        # would otherwise cost as much as running ones until the longest row ends.
        rows = torch.arange(B, device=device)  # original row of each batch entry
        done = torch.zeros(B, dtype=torch.bool, device=device)  # per batch entry
        check_every = 1 if device.type == "cpu" else 8
        steps = N
        for step in range(N):
            next_tokens, next_logprobs = sample_next(logits, params, generator)  # [b], [b]
            if self.token_sync is not None:
                next_tokens = self.token_sync(next_tokens)
            tokens[rows, step] = next_tokens.masked_fill(done, pad)
            logprobs[rows, step] = next_logprobs.masked_fill(done, 0.0)
            done |= torch.isin(next_tokens, stop_ids_t)
            if step == N - 1:
                break
            if (step + 1) % check_every == 0:
                if params.stop_strings:
                    done |= self._stop_string_hits(tokens[rows, :step + 1], done, params.stop_strings)
                n_running = int((~done).sum())
                if n_running == 0:
                    steps = step + 1
                    break
                if n_running <= len(rows) // 2:
                    keep = (~done).nonzero().squeeze(1)  # [n_running]
                    rows, done, next_tokens = rows[keep], done[keep], next_tokens[keep]
                    lengths, decode_mask = lengths[keep], decode_mask[keep]
                    cache.keep_rows(keep, filled=P + step)
            logits = model(next_tokens[:, None], positions=(lengths + step)[:, None], cache=cache,
                           cache_start=P + step, attn_mask=decode_mask[..., :P + step + 1])[:, 0]
        return self._finish(tokens[:, :steps].tolist(), logprobs[:, :steps].tolist(), stop_ids, params)

    def _stop_string_hits(self, tokens: torch.Tensor, done: torch.Tensor, stops) -> torch.Tensor:
        finished = done.tolist()  # one device->host copy, not one per row
        hits = [not finished[i] and first_stop(self.tokenizer.decode(row), stops) is not None
                for i, row in enumerate(tokens.tolist())]
        return torch.tensor(hits, dtype=torch.bool, device=done.device)

    def _finish(self, token_rows, logprob_rows, stop_ids, params) -> list[Completion]:
        stop_set, out = set(stop_ids), []
        for row, row_logprobs in zip(token_rows, logprob_rows):
            end = next((i + 1 for i, t in enumerate(row) if t in stop_set), None)
            reason = "length" if end is None else "stop"
            row, row_logprobs = row[:end or len(row)], row_logprobs[:end or len(row)]
            text = self.tokenizer.decode(row)
            if params.stop_strings:
                cut = truncate_at_stop_string(row, self.tokenizer.decode, params.stop_strings)
                if cut is not None:
                    (kept, text), reason = cut, "stop"
                    row, row_logprobs = row[:kept], row_logprobs[:kept]
            out.append(Completion(token_ids=row, logprobs=row_logprobs, finish_reason=reason, text=text))
        return out
