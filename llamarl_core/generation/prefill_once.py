"""Prefill once per group: identical prompts share one prefill, their slots get copies of its KV.

RL samples G completions per prompt, so a rollout chunk holds every prompt G times (eval's
pass@k too). Prefilling each copy repeats the same work G times, and with a chat template's
system prompt the prompt is often longer than the completion: most of a chunk's generation
compute was repeated prefill. Here a prompt is prefilled once; its G samples start from that
KV, copied into their own slots (`SlotCache.move`: P positions per layer, a memory copy, no
matmul), and sample their first tokens from the one set of last-token logits, each with its
own noise (sampling.row_seed), so they still diverge from the first token on.

Groups are found by content (the prompt's token ids), so no caller has to say what a group
is. Admission is unchanged (continuous batching refills a freed slot with the next waiting
prompt, so a group can straddle two admissions): a member admitted after its siblings takes
the prompt KV from any slot that still holds it (positions 0..P-1 of a slot keep its prompt's
KV whatever it decoded since, and after its sequence ended until the slot is refilled; often
the freed slot it lands in is its sibling's own, and nothing is copied) and the last-token
logits kept for that group while members still wait (one [V] row per straddling group; with
groups contiguous in the queue, at most one). Only KV computed under the current policy
version is shared: after an in-flight weight swap a later member is prefilled afresh under
the new weights. Where no slot holds it any more it is prefilled again: correct, only slower.

Different prompts admitted together that start alike (a chat template's system turn and
user header: 11 of the smollm2_cpu recipe's 33 tokens) share that prefix's prefill too:
it is computed once, in the first admitted slot, its K/V copied into the others' positions
0..L-1, and the rest of each prompt is prefilled after it (`forward.prefill(start=L)`,
attending to the cached prefix). Only within one admission (the first fill of the slots, and
any refill that admits several prompts at once); no prefix cache is kept across admissions.

Exactness: the shared prefill of identical prompts is the same computation as each copy's
own (rows of a prefill do not interact; tested bit-for-bit on CPU), and a sample's noise is
keyed by the sample, not by its row, so tokens and μ equal G separate prefills (tested). A
shared prefix of different prompts changes the summation order of the rest's attention (the
prefix keys come from a shorter prefill), so there logits agree to float32 rounding (tested
against separate prefills and against the full forward within 1e-5).
"""
from __future__ import annotations

import time
from collections import Counter

import torch

from .forward import prefill

MIN_SHARED_PREFIX = 8  # tokens: a shorter common prefix is not worth a second prefill call


class GroupPrefill:
    """Prefill planning for one `scheduler.Batch`: which admitted rows compute, which copy."""

    def __init__(self, prompts: list[list[int]], enabled: bool = True):
        self.prompts, self.enabled = prompts, enabled  # streaming appends to `prompts` as it runs
        self._ids: dict[tuple, int] = {}
        self.key: list[int] = []              # prompt index -> group id (by content)
        self.waiting: Counter = Counter()     # members of each group known and not yet admitted
        self._learn()
        # slot -> (group, version) whose prompt KV its positions 0..P-1 hold; still true after
        # its sequence ended (decode writes a free slot's K/V only at positions >= P)
        self.slot_kv: dict[int, tuple[int, int]] = {}
        self.held: dict[int, tuple[int, torch.Tensor]] = {}  # group -> (version, last-token logits [V])
        self.stats = {"prompt_tokens": 0, "prefill_tokens": 0, "shared_tokens": 0, "prefill_s": 0.0}

    def _learn(self) -> None:
        """Group ids for prompts added since the last call (streaming's refill appends them)."""
        for p in self.prompts[len(self.key):]:
            k = self._ids.setdefault(tuple(p), len(self._ids))
            self.key.append(k)
            self.waiting[k] += 1

    def prefill(self, batch, idx: list[int], slots: list[int], forward=None) -> torch.Tensor:
        """Write the prompts `idx` into cache slots `slots`; -> logits [len(idx), V] at each
        prompt's last token. `batch` gives the model, cache and policy version. `forward(ids,
        lengths, slots, start)`, if given, runs the prompts' prefill in place of
        `forward.prefill` (the scheduler's decode step joined to it); it is called at most
        once, and not at all when every row starts from KV already held."""
        start = time.perf_counter()
        self._learn()
        version, dests = batch.version, set(slots)
        lead, origin = {}, {}  # group -> its first row in this call; -> the slot its KV comes from
        fresh, copies, pick = [], [], []  # pick[r]: ("fresh", i) or ("held", group)
        for r, j in enumerate(idx):
            k, d = self.key[j], slots[r]
            self.waiting[k] -= 1
            if self.enabled and k in lead:  # a sibling admitted in this same call
                pick.append(pick[lead[k]])
            else:
                lead[k] = r
                src = self._source(k, version, d, dests) if self.enabled else None
                if src is None:
                    pick.append(("fresh", len(fresh)))
                    fresh.append(r)
                    src = d
                else:
                    pick.append(("held", k))
                origin[k] = src
            if origin[k] != d:
                copies.append((origin[k], d, j))  # one move: every source is read before any write
        logits, computed = self._prefill(batch, [idx[r] for r in fresh], [slots[r] for r in fresh], forward)
        if copies:
            device = batch.engine.device
            src = torch.tensor([c[0] for c in copies], device=device)
            dst = torch.tensor([c[1] for c in copies], device=device)
            batch.cache.move(src, dst, max(len(self.prompts[c[2]]) for c in copies))
        rows = [logits[i] if kind == "fresh" else self.held[i][1] for kind, i in pick]
        out = torch.stack(rows)  # [len(idx), V]
        for j, d in zip(idx, slots):
            self.slot_kv[d] = (self.key[j], version)
        for k, r in lead.items():
            if self.waiting[k] > 0:  # members still wait: keep the logits they will start from
                self.held[k] = (version, out[r].clone())
            else:
                self.held.pop(k, None)
        st = self.stats
        st["prompt_tokens"] += sum(len(self.prompts[j]) for j in idx)
        st["prefill_tokens"] += computed
        st["shared_tokens"] = st["prompt_tokens"] - st["prefill_tokens"]
        st["prefill_s"] += time.perf_counter() - start  # host time (on CUDA: launches only)
        return out

    def moved(self, moves: list[tuple[int, int]]) -> None:
        """The scheduler copied slot src's cache to slot dst for each (src, dst) (compaction)."""
        before = dict(self.slot_kv)
        for src, dst in moves:
            if src in before:
                self.slot_kv[dst] = before[src]
            else:
                self.slot_kv.pop(dst, None)

    def _source(self, k: int, version: int, dest: int, dests: set):
        """A slot holding group k's prompt KV from `version` (the destination itself first; else
        one this call does not overwrite), if k's last-token logits are held; else None."""
        held = self.held.get(k)
        if held is None or held[0] != version:
            return None
        if self.slot_kv.get(dest) == (k, version):
            return dest
        return next((s for s, kv in self.slot_kv.items() if kv == (k, version) and s not in dests), None)

    def _prefill(self, batch, idx: list[int], slots: list[int], forward=None) -> tuple[torch.Tensor, int]:
        """Prefill distinct prompts `idx` into `slots` -> (last-token logits, tokens computed);
        a prefix of at least `MIN_SHARED_PREFIX`
        tokens that all of them start with (a chat template's system turn) is prefilled once,
        in the first slot, its K/V copied into the others, and only the rest of each prompt
        is prefilled after it."""
        engine = batch.engine
        if not idx:
            return torch.empty(0, device=engine.device), 0
        device = engine.device
        lengths = [len(self.prompts[j]) for j in idx]
        shared = self._shared_prefix(idx) if self.enabled and len(idx) > 1 else 0
        ids = torch.full((len(idx), max(lengths)), engine.tokenizer.pad_id, dtype=torch.long)
        for r, j in enumerate(idx):
            ids[r, :lengths[r]] = torch.as_tensor(self.prompts[j], dtype=torch.long)
        ids, slot_ids = ids.to(device), torch.tensor(slots, device=device)
        if shared:
            prefill(batch.model, engine.proj, batch.cache, ids[:1, :shared],
                    torch.tensor([shared], device=device), slot_ids[:1])
            batch.cache.move(slot_ids[:1].expand(len(idx) - 1), slot_ids[1:], shared)
        rest = (ids[:, shared:], torch.tensor(lengths, device=device) - shared, slot_ids, shared)
        logits = (forward(*rest) if forward is not None
                  else prefill(batch.model, engine.proj, batch.cache, *rest))
        return logits, sum(lengths) - (len(idx) - 1) * shared

    def _shared_prefix(self, idx: list[int]) -> int:
        """Tokens every prompt `idx` starts with, leaving each at least one of its own (its
        last-token logits come from the rest); 0 when under MIN_SHARED_PREFIX."""
        first = self.prompts[idx[0]]
        n = min(len(self.prompts[j]) for j in idx) - 1
        for j in idx[1:]:
            p = self.prompts[j]
            n = next((t for t in range(n) if p[t] != first[t]), n)
            if n < MIN_SHARED_PREFIX:
                return 0
        return n if n >= MIN_SHARED_PREFIX else 0
