"""Greedy decoding on an FSDP2-sharded trainer model, through the engine's own decode loop.

Gathering the full model on one rank (`parallel.full_state`) does not fit at 70B/405B. Here
every trainer rank runs the engine's scheduler (`generation/scheduler.py: Batch`, its
`SlotCache`, prefill and decode, its stop rule) on the same prompts, and the engine's
projections are read one block at a time: `_BlockByBlock` gathers block i (FSDP2's
`unshard`) when the forward first asks for one of its projections and frees it (`reshard`)
when the forward moves on, so no rank holds more than its shard plus one block. The
embedding and the [norm, output] unit are called as modules: FSDP2's own hooks gather them.
The ranks make the same calls in the same order because they decode the same prompts with
the same greedy decisions; rank 0's completions are the ones reported.

`generate(prompts, params, seed)` is `GenerationEngine.generate` for greedy decoding (stop
tokens, stop strings, `max_new_tokens`), so `eval.evaluate` takes it as its engine.

Cost: every decode step all-gathers every block once (what sharding at 70B/405B buys: no
rank holds the model). What amortises it is the batch (one gather serves all its rows: the
eval's batches are resources.generator.max_batch_size prompts).
"""
from __future__ import annotations

import torch

from llamarl_core.config.schema import GeneratorResources
from llamarl_core.generation.engine import completions
from llamarl_core.generation.forward import SlotCache
from llamarl_core.generation.fused import BLOCK_PROJECTIONS, Proj, _stacked_bias
from llamarl_core.generation.params import Completion, SamplingParams
from llamarl_core.generation.scheduler import Batch


class _BlockByBlock:
    """`proj` for the engine's forward (`forward.py` reads `proj[f"{i}.qkv"]` before anything
    else of block i): block i gathered on first use, the previous block freed then; the
    output head is left to the model's own [norm, output] unit (`"output" in proj` is False)."""

    def __init__(self, model):
        self.model, self.at, self.projs = model, None, {}

    def __contains__(self, key: str) -> bool:
        self.release()  # the head comes after the last block
        return False

    def __getitem__(self, key: str) -> Proj:
        i, name = key.split(".", 1)
        if self.at != int(i):
            self.release()
            self._gather(int(i))
        return self.projs[name]

    def _gather(self, i: int) -> None:
        layer = self.model.layers[i]
        if hasattr(layer, "unshard"):  # an FSDP2 unit (a plain block is whole already)
            layer.unshard()
        self.at = i
        for name, modules in BLOCK_PROJECTIONS:
            linears = [layer.get_submodule(m) for m in modules]
            weight = torch.cat([lin.weight for lin in linears]) if len(linears) > 1 else linears[0].weight
            self.projs[name] = Proj(weight, bias=_stacked_bias(linears))

    def release(self) -> None:
        if self.at is not None:
            self.projs = {}
            layer = self.model.layers[self.at]
            if hasattr(layer, "reshard"):
                layer.reshard()
            self.at = None


class LockstepGreedy:
    """What `scheduler.Batch` needs of an engine, over the sharded model. `group`: the
    trainer ranks that decode together (each must call `generate` with the same prompts)."""

    token_sync = None
    compact_finished_rows = True
    fuse_prefill = True  # a refill's prefill joins the decode step (forward.step)

    def __init__(self, model, tokenizer, group, device: torch.device | str, compute_dtype: torch.dtype,
                 max_batch_size: int = GeneratorResources.max_batch_size):
        self.model, self.tokenizer, self.group = model, tokenizer, group
        self.device, self.compute_dtype = torch.device(device), compute_dtype
        self.max_seq_len = model.args.max_seq_len  # FSDP2 keeps the module's class and attributes
        self.max_batch_size = max_batch_size
        self.proj = _BlockByBlock(model)
        self._cache: SlotCache | None = None
        self.prefill_once = False  # held-out prompts are distinct: no two share a prefill

    def slot_cache(self, slots: int, length: int) -> SlotCache:
        if self._cache is None or self._cache.slots < slots or self._cache.max_len < length:
            self._cache = SlotCache(self.model, slots, length, dtype=self.compute_dtype)
        return self._cache

    def refresh_weights(self) -> None:  # no weight swaps during an eval
        pass

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None,
                 on_finish=None) -> list[Completion]:
        if params.temperature != 0.0:
            raise ValueError("LockstepGreedy decodes greedily only (temperature 0)")
        if not prompts:
            return []
        # FSDP2 names its root at the first forward through it: one token through the root
        # first, so the units gathered below are never taken for the root.
        self.model(torch.full((1, 1), self.tokenizer.pad_id, dtype=torch.long, device=self.device))
        was_training = self.model.training
        self.model.eval()
        try:
            done = Batch(self, prompts, params, 0 if seed is None else seed, static=False,
                         on_finish=on_finish).run()
        finally:
            self.proj.release()
            self._reshard()
            self.model.train(was_training)
        return completions(done, params, self.tokenizer)

    def _reshard(self) -> None:
        """FSDP2 keeps the root's units gathered after a forward (for the backward that follows
        in training); no backward follows here, so free them as training expects."""
        for m in self.model.modules():
            if hasattr(m, "reshard"):
                m.reshard()
