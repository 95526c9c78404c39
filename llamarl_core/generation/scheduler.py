"""Which sequences decode together: continuous or static batching over a slot cache.

    loop:
      between_steps() → a new policy version? (weights were swapped in place) → note it
      admit: free slots ← next prompts (continuous: whenever a slot is free; static: only
             when every slot is free), prefilled together into their slots, first token sampled
      decode: one token for every occupied slot
      finish: rows that hit a stop token / stop string / their length cap leave; each is
             handed to `on_finish` at once, its slot free for the next admission

Occupied slots are kept at the front (slots 0..B-1 decode as one batch). Once no prompt is
waiting and at most half the batch still runs, the running rows are moved to the front
(`SlotCache.move`) so finished rows stop costing compute; continuous batching refills a
freed slot in place instead. Both modes run the same kernels: only who shares a batch differs.

Per sequence the scheduler records the policy versions it decoded under (first and last,
and per token): a weight swap between decode steps changes the policy mid-sequence, and the
log-probs it reports are those it actually sampled with.

Streaming (`refill`): the prompt list is not fixed. Whenever no prompt waits and a slot is
free, `refill(free_slots)` may hand over more prompts (each a token list, or a (tokens, cap on
new tokens) pair) (the next step's, generation/stream
callers decide), admitted at the next step like any other; the run ends once nothing runs
and `refill` has nothing. Finished rows are then not kept (`run()` returns []).

Which rows ended (a stop token, or a stop string in the decoded text) is read on the host one
loop turn late (`host_reads.LateHostRead`: one non-blocking copy per turn, one event wait),
so the GPU already runs the next step while the host decides. A row that stopped therefore
decodes one token more, which is dropped; a row that reaches its length cap (the host knows
that without a read) leaves its slot at once, its tokens kept aside until its last check.

With a repetition penalty each slot keeps its own seen-token mask (`seen` [slots, V]): set from
its prompt when admitted (each copy of a prefilled-once group from its own prompt list entry),
each sampled token added as it is drawn, moved with the slot when rows are compacted.

Admission prefills each distinct prompt once (`prefill_once.GroupPrefill`: a group's G
copies share one prefill's KV), and every token is drawn with noise keyed by (seed, sample,
token index), never by slot: which rows share a step does not change what a sample draws.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Optional

import torch

from .forward import decode, step
from .host_reads import LateHostRead
from .params import Finished, SamplingParams, stop_ids
from .prefill_once import GroupPrefill
from .sampling import row_seed, sample_next
from .stops import first_stop, truncate_at_stop_string

STOP_TAIL_TOKENS = 4  # stop strings are searched in the last (4 x longest stop + 4) tokens


class Batch:
    """One run of `prompts` through the engine; `run()` returns Finished in prompt order."""

    def __init__(self, engine, prompts: list[list[int]], params: SamplingParams,
                 seed: int, static: bool,
                 on_finish: Optional[Callable[[Finished], None]] = None,
                 between_steps: Optional[Callable[[], Optional[int]]] = None,
                 policy_version: int = 0, refill: Optional[Callable[[int], list[list[int]]]] = None):
        self.engine, self.model, self.params = engine, engine.model, params
        self.prompts, self.seed, self.static = list(prompts), seed, static
        self.refill = refill  # streaming: more prompts as slots free up (None: a fixed list)
        self.on_finish, self.between_steps = on_finish, between_steps
        self.version = policy_version
        device, tok = engine.device, engine.tokenizer
        self.stop_ids_t = torch.tensor(stop_ids(tok, params), dtype=torch.long, device=device)
        self.tail = STOP_TAIL_TOKENS * max((len(s) for s in params.stop_strings), default=0) + 4
        self.cap = [min(params.max_new_tokens, engine.max_seq_len - len(p)) for p in prompts]
        B, N = min(engine.max_batch_size, len(prompts)), max(self.cap, default=1)
        length = max((len(p) for p in prompts), default=1) + N
        if refill is not None:  # later prompts are unknown: size for any that fits
            B, N = engine.max_batch_size, min(params.max_new_tokens, engine.max_seq_len - 1)
            length = engine.max_seq_len
        self.cache = engine.slot_cache(B, length)
        # Column N is scratch: free slots write their (ignored) token there.
        self.tokens = torch.full((B, N + 1), tok.pad_id, dtype=torch.long, device=device)
        self.logprobs = torch.zeros(B, N + 1, dtype=torch.float32, device=device)
        self.versions = torch.zeros(B, N + 1, dtype=torch.long, device=device)  # per token
        self.next_tok = torch.zeros(B, dtype=torch.long, device=device)
        # each slot's prompt + completion tokens so far (repetition penalty only; [B, V] once V is known)
        self.seen: Optional[torch.Tensor] = None
        self.pos = torch.zeros(B, dtype=torch.long, device=device)  # next cache index per slot
        self.sample = [-1] * B        # prompt index in each slot (-1: free)
        self.made = [0] * B           # tokens generated so far per slot
        self.first_version: dict[int, int] = {}       # prompt index → version of its first token
        self.host_tokens: dict[int, list[int]] = {}   # prompt index → its tokens (stop strings only)
        self.capped: dict[int, tuple] = {}            # prompt index → (tokens, logprobs) kept aside
        self.reader = LateHostRead(device)
        self.checks = None            # the last turn's (host read, [(prompt, n, version)]) to resolve
        self.groups = GroupPrefill(self.prompts, enabled=engine.prefill_once)  # the list refill extends
        self.used = 0                 # slots 0..used-1 form the decode batch
        self.waiting = deque(range(len(prompts)))
        self.out: list[Optional[Finished]] = [None] * len(prompts)

    def run(self) -> list[Finished]:
        while True:
            self._poll_weights()
            self._more()
            if not (self.waiting or any(s >= 0 for s in self.sample[:self.used]) or self.checks is not None):
                break
            self._check(self._turn())
        return [] if self.refill is not None else self.out  # type: ignore[return-value]

    def _more(self) -> None:
        """Streaming: ask `refill` for as many prompts as there are free slots."""
        if self.refill is None or self.waiting:
            return
        free = self.cache_slots - sum(s >= 0 for s in self.sample[:self.used])
        for item in (self.refill(free) if free else []):
            # a prompt, or (prompt, its own cap on new tokens): an episode's later turn (envs/runner.py)
            prompt, cap = item if isinstance(item, tuple) else (item, self.params.max_new_tokens)
            if not prompt or len(prompt) >= self.engine.max_seq_len or cap < 1:
                raise ValueError(f"a streamed prompt has {len(prompt)} tokens (cap {cap}); it needs 1 .. "
                                 f"{self.engine.max_seq_len - 1} (max_seq_len {self.engine.max_seq_len})")
            self.waiting.append(len(self.prompts))
            self.prompts.append(prompt)
            self.cap.append(min(cap, self.params.max_new_tokens, self.engine.max_seq_len - len(prompt),
                                self.tokens.shape[1] - 1))
            self.out.append(None)

    # ---- phases ------------------------------------------------------------------------
    def _poll_weights(self) -> None:
        if self.between_steps is None:
            return
        with torch.inference_mode(False):  # the hook may write weights in place (a sync)
            version = self.between_steps()
        if version is not None and version != self.version:
            self.version = version
            self.engine.refresh_weights()

    def _turn(self) -> list:
        """One loop turn: admit waiting prompts into free slots and decode the running rows.
        With rows running, the admitted prompts' prefill joins the decode step's forward
        (`forward.step`: one pass over the weights for both); else admission, then decode."""
        fuse = (self.engine.fuse_prefill and self.waiting and not self.static
                and any(s >= 0 for s in self.sample[:self.used]))
        if not fuse:
            return [x for x in (self._admit(), self._decode()) if x is not None]
        B, span = self._decode_rows()  # before admission: the rows running now
        free = [s for s in range(B) if self.sample[s] < 0]
        if free:  # their scratch K/V goes to the last index, never over a prompt prefilled now
            self.pos[torch.tensor(free, device=self.pos.device)] = self.cache.max_len - 1
        admission = self._admission()
        if admission is None:
            return [self._decoded(B, self._decode_logits(B, span))]
        idx, slots = admission
        decoded = []

        def forward(ids, lengths, slot_ids, start):
            d, p = step(self.model, self.engine.proj, self.cache,
                        decode_rows=(self.next_tok[:B], self.pos[:B], span),
                        prefill_rows=(ids, lengths, slot_ids, start))
            decoded.append(d)
            return p
        logits = self.groups.prefill(self, idx, slots, forward=forward)
        # every admitted row may start from KV already held (a group's later member): no prefill ran
        dec = self._decoded(B, decoded[0] if decoded else self._decode_logits(B, span))
        return [self._admitted(idx, slots, logits), dec]

    def _admit(self):
        admission = self._admission()
        if admission is None:
            return None
        idx, slots = admission
        return self._admitted(idx, slots, self.groups.prefill(self, idx, slots))

    def _admission(self):
        """Which waiting prompts take which free slots now: (prompt indices, slots) or None."""
        if not self.waiting:
            return None
        running = sum(s >= 0 for s in self.sample[:self.used])
        if self.static and running:
            return None
        if self.static:
            self.used = 0
        free = [i for i in range(self.used) if self.sample[i] < 0]
        free += range(self.used, self.cache_slots)
        take = min(len(free), len(self.waiting))
        if take == 0:
            return None
        slots = free[:take]
        idx = [self.waiting.popleft() for _ in range(take)]
        self.used = max(self.used, max(slots) + 1)
        return idx, slots

    def _admitted(self, idx: list[int], slots: list[int], logits: torch.Tensor):
        """Prompts `idx` were prefilled into `slots` (logits [n, V] at their last tokens):
        sample each one's first token."""
        device = self.engine.device
        slots_t = torch.tensor(slots, device=device)
        lengths_t = torch.tensor([len(self.prompts[j]) for j in idx], device=device)
        if self.params.repetition_penalty != 1.0:
            seen = self._seen(logits.shape[-1])
            seen[slots_t] = False
            for s, j in zip(slots, idx):
                seen[s, torch.tensor(self.prompts[j], device=device)] = True
        tok, logp = self._sample(logits, [(j, 0) for j in idx], slots_t)
        self.tokens[slots_t, 0], self.logprobs[slots_t, 0] = tok, logp
        self.versions[slots_t, 0] = self.version
        self.next_tok[slots_t], self.pos[slots_t] = tok, lengths_t
        for s, j in zip(slots, idx):
            self.sample[s], self.made[s], self.first_version[j] = j, 1, self.version
            self.host_tokens[j] = []
        return tok, self._stepped(slots)

    def _decode(self):
        rows = self._decode_rows()
        if rows is None:
            return None
        B, span = rows
        return self._decoded(B, self._decode_logits(B, span))

    def _decode_rows(self):
        """(B, span) of this turn's decode step over slots 0..B-1 (compacted first when most
        rows ended), or None when no row runs."""
        B = self.used
        live = [s for s in range(B) if self.sample[s] >= 0]
        if not live:
            return None
        compact = self.engine.compact_finished_rows and (self.static or not self.waiting)
        if compact and len(live) <= B // 2:
            self._compact(live)
            B = self.used
        return B, max(self._position(s) for s in range(B) if self.sample[s] >= 0) + 1

    def _decode_logits(self, B: int, span: int) -> torch.Tensor:
        return decode(self.model, self.engine.proj, self.cache, self.next_tok[:B], self.pos[:B], span)

    def _decoded(self, B: int, logits: torch.Tensor):
        """Slots 0..B-1 decoded one token (logits [B, V]): sample it for each running row."""
        tok, logp = self._sample(logits, [(self.sample[s], self.made[s]) if self.sample[s] >= 0
                                          else None for s in range(B)], torch.arange(B, device=logits.device))
        scratch = self.tokens.shape[1] - 1
        made = torch.tensor([self.made[s] if self.sample[s] >= 0 else scratch for s in range(B)],
                            device=tok.device)
        rows = torch.arange(B, device=tok.device)
        self.tokens[rows, made], self.logprobs[rows, made] = tok, logp
        self.versions[rows, made] = self.version
        self.next_tok[:B] = tok
        self.pos[:B] += 1
        self.pos[:B].clamp_(max=self.cache.max_len - 1)  # free slots write harmlessly in place
        for s in range(B):
            if self.sample[s] >= 0:
                self.made[s] += 1
        return tok, self._stepped(range(B))

    def _sample(self, logits: torch.Tensor, rows: list, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """rows[r]: (sample index, token index) of row r, or None for a free slot; slots [B]: the
        slot of row r (its seen-token mask). A free slot's token marks its mask harmlessly:
        admission resets it."""
        seeds = [None if key is None else row_seed(self.seed, *key) for key in rows]
        seen = self.seen[slots] if self.seen is not None else None  # [B, V]
        tok, logp = sample_next(logits, self.params, seeds, seen)
        if self.engine.token_sync is not None:  # TP ranks of a replica take rank 0's tokens
            tok = self.engine.token_sync(tok)
        if self.seen is not None:
            self.seen[slots, tok] = True
        return tok, logp

    def _seen(self, vocab: int) -> torch.Tensor:
        if self.seen is None:
            self.seen = torch.zeros(self.cache_slots, vocab, dtype=torch.bool, device=self.engine.device)
        return self.seen

    def _stepped(self, slots) -> list:
        """What to check for each of `slots` that just sampled: (prompt, tokens so far, version)
        or None for a free slot. A row at its length cap leaves its slot now."""
        out = []
        for s in slots:
            j = self.sample[s]
            if j < 0:
                out.append(None)
                continue
            n = self.made[s]
            out.append((j, n, self.version))
            if n >= self.cap[j]:  # kept aside until its stop check: the slot is free for the next prompt
                self.capped[j] = (self.tokens[s, :n].clone(), self.logprobs[s, :n].clone(),
                                  self.versions[s, :n].clone())
                self.sample[s] = -1
        return out

    def _check(self, sampled: list) -> None:
        """Queue this turn's stop checks (one copy to the host), then resolve the last turn's."""
        current = None
        if sampled:
            tok = torch.cat([t for t, _ in sampled])
            flags = torch.isin(tok, self.stop_ids_t).long()
            payload = torch.stack([flags, tok]) if self.params.stop_strings else flags[None]
            current = (self.reader.start(payload), [c for _, checks in sampled for c in checks])
        previous, self.checks = self.checks, current
        if previous is not None:
            handle, checks = previous
            self._resolve(checks, *self.reader.finish(handle))

    def _resolve(self, checks: list, stopped: list, tokens: Optional[list] = None) -> None:
        """Hand over every row whose check says it ended (stop token, stop string, cap)."""
        for r, check in enumerate(checks):
            if check is None or self.out[check[0]] is not None:
                continue  # a free slot, or a row that ended at an earlier check
            j, n, version = check
            reason = "stop" if stopped[r] else None
            if tokens is not None:
                host = self.host_tokens[j]
                host.append(tokens[r])
                if reason is None and first_stop(self.engine.tokenizer.decode(host[-self.tail:]),
                                                 self.params.stop_strings):
                    reason = "stop"
            if reason is None and n >= self.cap[j]:
                reason = "length"
            if reason is not None:
                self._emit(j, n, reason, version)

    def _emit(self, j: int, n: int, reason: str, version: int) -> None:
        if j in self.capped:  # it reached its cap after the step that ended it: keep n tokens
            tokens, logprobs, versions = (t[:n] for t in self.capped.pop(j))
        else:
            s = self.sample.index(j)
            tokens, logprobs = self.tokens[s, :n].clone(), self.logprobs[s, :n].clone()
            versions = self.versions[s, :n].clone()
            self.sample[s] = -1
        if self.params.stop_strings:
            cut = truncate_at_stop_string(self.host_tokens[j][:n], self.engine.tokenizer.decode,
                                          self.params.stop_strings)
            if cut is not None:
                tokens, logprobs, reason = tokens[:cut[0]], logprobs[:cut[0]], "stop"
                versions = versions[:cut[0]]
        done = Finished(index=j, token_ids=tokens, logprobs=logprobs, finish_reason=reason,
                        policy_versions=(self.first_version[j], version), token_versions=versions)
        if self.refill is not None:  # streaming: nothing is kept once handed over
            self.out[j] = True  # type: ignore[call-overload]
            self.host_tokens.pop(j, None)
            self.first_version.pop(j, None)
        else:
            self.out[j] = done
        if self.on_finish is not None:
            self.on_finish(done)

    def _compact(self, live: list[int]) -> None:
        n = len(live)
        moves = [(src, dst) for dst, src in enumerate(live) if src != dst]
        if moves:
            src = torch.tensor([m[0] for m in moves], device=self.engine.device)
            dst = torch.tensor([m[1] for m in moves], device=self.engine.device)
            filled = max(self._position(s) for s in live) + 1
            self.cache.move(src, dst, filled)
            self.groups.moved(moves)
            for buf in (self.tokens, self.logprobs, self.versions, self.next_tok, self.pos, self.seen):
                if buf is not None:
                    buf[dst] = buf[src]
            for lst in (self.sample, self.made):
                for a, b in moves:
                    lst[b] = lst[a]
        for s in range(n, self.used):
            self.sample[s] = -1
        self.used = n

    def _position(self, s: int) -> int:
        """Cache index slot s writes next (its prompt, then all but the newest token)."""
        return len(self.prompts[self.sample[s]]) + self.made[s] - 1

    @property
    def cache_slots(self) -> int:
        return self.tokens.shape[0]
