"""Batched KV-cache generation engine in plain PyTorch, with continuous batching.

    engine = GenerationEngine(model, tokenizer, max_batch_size=64, batching="continuous")
    engine.generate(prompts, params, seed) -> list[Completion]          # eval, tests
    engine.stream(prompts, params, seed, on_finish=..., between_steps=...) -> list[Finished]

`stream` is the rollout path: tensors out (`Finished.token_ids`/`logprobs` stay on the
device), each sequence handed to `on_finish` the moment it ends, and `between_steps()` called
before every decode step so a weight sync can swap weights at a step boundary (it returns the
policy version now held; each sequence records the versions it ran under).

Pieces: `scheduler.Batch` decides who decodes together (continuous: a finished row's slot is
refilled at once with the next prompt, its prefill written into that slot; static: a batch
runs until its longest row ends); `forward.py` runs prefill and decode over the slot cache;
`fused.py` holds the merged QKV and gate/up weights (adopted as the model's own storage when
nobody trains the model, so in-place weight swaps need no notification; copies otherwise).
Sampling never syncs with the host; one host read per step learns which rows ended.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from ..config.choices import BATCHING, QUANTIZATIONS
from ..config.schema import GenerationConfig, GeneratorResources  # the defaults: one source
from ..models.llama import Llama
from .forward import SlotCache
from .fused import EngineWeights
from .params import Completion, Finished, SamplingParams
from .scheduler import Batch



class GenerationEngine:
    def __init__(self, model: Llama, tokenizer, max_batch_size: int = GeneratorResources.max_batch_size,
                 max_seq_len: Optional[int] = None, quantization: str = GeneratorResources.quantization,
                 batching: str = GenerationConfig.batching,
                 token_sync: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
                 compact_finished_rows: bool = True, prefill_once: bool = True,
                 fuse_prefill: bool = True):
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if batching not in BATCHING:
            raise ValueError(f"batching must be one of {BATCHING}, got {batching!r}")
        self.model, self.tokenizer = model, tokenizer
        self.max_batch_size, self.batching = max_batch_size, batching
        self.max_seq_len = min(max_seq_len or model.args.max_seq_len, model.args.max_seq_len)
        self.quantization = quantization
        # Tensor parallelism: every rank of a replica must take the same token at every step
        # (their KV caches, stop decisions and step counts must agree). `token_sync` (built in
        # transport/tensor_parallel.py) returns TP rank 0's sampled tokens on every rank.
        self.token_sync = token_sync
        # False keeps a finished row in the decode batch until its chunk ends (what
        # `transformers.generate` and a static GPU batch cost): the bench's padded baseline.
        self.compact_finished_rows = compact_finished_rows
        # False prefills every copy of a repeated prompt (a group's G samples) on its own: the
        # bench's baseline and the tests' reference (prefill_once.py).
        self.prefill_once = prefill_once
        # False runs a refill's prefill as its own forward before the decode step, instead of
        # in the decode step's (forward.step): the streaming bench's A/B and the tests' reference.
        self.fuse_prefill = fuse_prefill
        self.last_stats: dict = {}  # the last stream's prefill counters (GroupPrefill.stats)
        self.weights = EngineWeights(model, quantization)
        # what a weight sync rewrites, when not every projection (generation/lora_merge.py)
        self.changed_projections: Optional[set[str]] = None
        self.proj: dict = {}
        self._cache: Optional[SlotCache] = None

    @property
    def device(self) -> torch.device:
        return self.model.tok_embeddings.weight.device

    def refresh_weights(self) -> None:
        """Match the model's current weights (rebuilds quantized copies; cheap otherwise): only
        `changed_projections` when set (a LoRA generator's merge targets), else all."""
        self.weights.refresh(only=self.changed_projections)
        self.proj = self.weights.proj

    def slot_cache(self, slots: int, length: int) -> SlotCache:
        """The preallocated cache, reused across calls and regrown only when too small."""
        if self._cache is None or not self._cache.fits(self.model, slots, length):
            old = self._cache
            self._cache = SlotCache(self.model, max(slots, old.slots if old else 0),
                                    max(length, old.max_len if old else 0))
        return self._cache

    def stream(self, prompts: list[list[int]], params: SamplingParams, seed: Optional[int] = None,
               on_finish: Optional[Callable[[Finished], None]] = None,
               between_steps: Optional[Callable[[], Optional[int]]] = None,
               policy_version: int = 0,
               refill: Optional[Callable[[int], list[list[int]]]] = None) -> list[Finished]:
        """`refill(free_slots)`: streaming, more prompts whenever slots are free (scheduler.py);
        the call then ends once nothing runs and `refill` has none, and returns []."""
        for i, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {i} is empty; give at least one token (e.g. BOS)")
            if len(prompt) >= self.max_seq_len:
                raise ValueError(f"prompt {i} has {len(prompt)} tokens; max_seq_len is {self.max_seq_len}")
        if not prompts and refill is None:
            return []
        seed = seed if seed is not None else int(torch.randint(2**62, ()).item())
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                self.proj = self.weights.current()
                batch = Batch(self, prompts, params, seed, static=self.batching == "static",
                              on_finish=on_finish, between_steps=between_steps,
                              policy_version=policy_version, refill=refill)
                try:
                    return batch.run()
                finally:
                    self.last_stats = dict(batch.groups.stats)
        finally:
            self.model.train(was_training)

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: Optional[int] = None,
                 on_finish: Optional[Callable[[Finished], None]] = None) -> list[Completion]:
        """`on_finish`: called as each row ends (an eval's progress bar counts rows with it)."""
        return completions(self.stream(prompts, params, seed, on_finish=on_finish), params, self.tokenizer)


def completions(finished: list[Finished], params: SamplingParams, tokenizer) -> list[Completion]:
    """The engine's `Finished` rows as `Completion`s: token lists, and the text cut at the
    first stop string (also for the sharded eval, eval/sharded_eval.py)."""
    out = []
    for done in finished:
        ids = done.token_ids.tolist()
        text = tokenizer.decode(ids)
        if params.stop_strings:
            from .stops import first_stop
            hit = first_stop(text, params.stop_strings)
            text = text if hit is None else text[:hit[0]]
        out.append(Completion(token_ids=ids, logprobs=done.logprobs.tolist(),
                              finish_reason=done.finish_reason, text=text))
    return out
