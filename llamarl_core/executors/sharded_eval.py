"""Greedy decoding on an FSDP2-sharded trainer model, for the held-out eval at any size.

Gathering the full model on one rank (`parallel.full_state`) does not fit at 70B/405B. Here
every trainer rank decodes the same batch through the sharded model itself: each forward
all-gathers one block at a time (FSDP2's hooks) and frees it again, so no rank holds more
than its shard plus one block. The ranks must make the same number of forward calls, so the
loop runs until no rank has an unfinished row (one all-reduce of a flag per step); the rows
each rank computes are identical, and rank 0's are the ones reported.

`generate(prompts, params, seed)` matches `GenerationEngine.generate` for greedy decoding
(stop tokens, stop strings, `max_new_tokens`), so `eval.evaluate` takes it as its engine.

Cost: every decode step all-gathers every block once (what sharding at 70B/405B buys: no
rank holds the model). There is no local way around it; what amortises it is the batch (one
gather serves all its rows: the eval's batches are resources.generator.max_batch_size
prompts). Each step reads the device once (the tokens and their log-probs together).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from llamarl_core.generation.params import Completion, SamplingParams, stop_ids
from llamarl_core.generation.stops import truncate_at_stop_string


class LockstepGreedy:
    def __init__(self, model, tokenizer, group, device: torch.device | str, compute_dtype: torch.dtype):
        self.model, self.tokenizer, self.group = model, tokenizer, group
        self.device, self.compute_dtype = torch.device(device), compute_dtype
        self.max_seq_len = model.args.max_seq_len  # FSDP2 keeps the module's class and attributes

    def _reshard(self) -> None:
        """FSDP2 keeps the root's parameters gathered after a forward (for the backward that
        follows in training); no backward follows here, so free them as training expects."""
        for m in self.model.modules():
            if hasattr(m, "reshard"):
                m.reshard()

    def _any(self, flag: bool) -> bool:
        """Whether `flag` holds on any trainer rank (keeps every rank's loop the same length)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return bool(t.item())

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Completion]:
        if params.temperature != 0.0:
            raise ValueError("LockstepGreedy decodes greedily only (temperature 0)")
        tok, B = self.tokenizer, len(prompts)
        stops = set(stop_ids(tok, params))
        lens = torch.tensor([len(p) for p in prompts], device=self.device)  # [B]
        P = int(lens.max())
        caps = [min(params.max_new_tokens, self.max_seq_len - len(p)) for p in prompts]
        N = max(caps)
        # Left-padded prompts: row i's tokens sit in columns P - len_i .. P - 1.
        ids = torch.full((B, P), tok.pad_id, dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            ids[i, P - len(p):] = torch.tensor(p, device=self.device)
        pad = P - lens  # [B] leading pad columns per row
        col = torch.arange(P + N, device=self.device)  # cache columns
        real = col[None, :] >= pad[:, None]  # [B, P+N] keys that are not padding
        positions = (torch.arange(P, device=self.device)[None, :] - pad[:, None]).clamp(min=0)  # [B, P]
        cache = self.model.new_cache(B, P + N, dtype=self.compute_dtype)
        causal = col[None, :P] <= torch.arange(P, device=self.device)[:, None]  # [P, P]
        mask = (causal[None] & real[:, None, :P])[:, None]  # [B, 1, P, P]
        logits = self.model(ids, positions, cache, 0, mask, last_only=True)[:, -1]  # [B, V]
        out: list[list[int]] = [[] for _ in range(B)]
        logprobs: list[list[float]] = [[] for _ in range(B)]
        reason: list[str | None] = [None] * B
        texts: list[str | None] = [None] * B
        for step in range(N):
            lp = torch.log_softmax(logits.float(), dim=-1)
            nxt = lp.argmax(dim=-1)  # [B]
            # One host read per step (not two per row): token ids are exact in float64.
            picked, picked_lp = torch.stack([nxt.double(), lp.gather(1, nxt[:, None])[:, 0].double()]).tolist()
            for i in range(B):
                if reason[i] is not None:
                    continue
                t = int(picked[i])
                out[i].append(t)
                logprobs[i].append(picked_lp[i])
                if t in stops:
                    reason[i] = "stop"
                elif params.stop_strings and (hit := truncate_at_stop_string(out[i], tok.decode, params.stop_strings)):
                    kept, texts[i] = hit
                    out[i], logprobs[i], reason[i] = out[i][:kept], logprobs[i][:kept], "stop"
                elif len(out[i]) >= caps[i]:
                    reason[i] = "length"
            # Same prompts on every rank, so the same N; the flag keeps early exits in step too.
            if step + 1 == N or not self._any(any(r is None for r in reason)):
                break
            start = P + step
            mask = real[:, None, None, :start + 1]  # [B, 1, 1, start+1]: every real key so far
            logits = self.model(nxt[:, None], (lens + step)[:, None], cache, start, mask, last_only=True)[:, -1]
        self._reshard()
        done = []
        for i in range(B):
            text = texts[i] if texts[i] is not None else tok.decode([t for t in out[i] if t not in stops])
            done.append(Completion(token_ids=out[i], logprobs=logprobs[i], finish_reason=reason[i] or "length",
                                   text=text))
        return done
