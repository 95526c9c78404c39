"""Generate one rollout chunk: this replica's share of a step's prompts, group_size each.

Shared by the async generator role and the synchronous colocated actor, so both sample
exactly the same prompts for chunk n with the same seeds.
"""
from __future__ import annotations

import time

import torch

from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.wire.rollout import Rollout
from llamarl_core.executors.routing import prompt_range
from llamarl_core.executors.setup import PromptSet, chunk_prompt_indices
from llamarl_core.generation import GenerationEngine, SamplingParams


class ChunkGenerator:
    def __init__(self, cfg: LlamaRLConfig, model, tokenizer, prompts: PromptSet,
                 replica: int, num_replicas: int, quantization: str = "none", token_sync=None):
        g, gen = cfg.resources.generator, cfg.generation
        self.cfg, self.tokenizer, self.prompts = cfg, tokenizer, prompts
        self.replica, self.num_replicas = replica, num_replicas
        self.engine = GenerationEngine(model, tokenizer, max_batch_size=g.max_batch_size,
                                       max_seq_len=gen.max_prompt_tokens + gen.max_new_tokens + 1,
                                       quantization=quantization, token_sync=token_sync)
        self.params = SamplingParams(max_new_tokens=gen.max_new_tokens, temperature=gen.temperature,
                                     top_p=gen.top_p, top_k=gen.top_k,
                                     stop_strings=tuple(gen.stop_strings))
        self.tokens_generated = 0

    def stats(self, since: float) -> dict:
        """Tokens generated so far and their rate since `since` (unix seconds)."""
        return {"tokens": self.tokens_generated,
                "tokens_per_s": self.tokens_generated / max(1e-9, time.time() - since)}

    def generate(self, chunk: int, policy_version: int) -> Rollout:
        a, gen = self.cfg.algorithm, self.cfg.generation
        indices = chunk_prompt_indices(len(self.prompts), chunk, a.prompts_per_step, self.cfg.run.seed)
        lo, hi = prompt_range(self.replica, self.num_replicas, a.prompts_per_step)
        example_ids = [i for i in indices[lo:hi] for _ in range(a.group_size)]
        prompt_ids = [self.prompts.prompt_ids[i] for i in example_ids]
        seed = (self.cfg.run.seed * 1_000_003 + chunk * 1009 + self.replica) % (2**62)
        outs = self.engine.generate(prompt_ids, self.params, seed=seed)
        n, length = len(outs), gen.max_prompt_tokens + gen.max_new_tokens
        tokens = torch.full((n, length), self.tokenizer.pad_id, dtype=torch.long)
        behavior = torch.zeros(n, gen.max_new_tokens)
        prompt_lens, completion_lens = torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)
        for r, (p, out) in enumerate(zip(prompt_ids, outs)):
            c = len(out.token_ids)
            tokens[r, :len(p)] = torch.tensor(p)
            tokens[r, len(p):len(p) + c] = torch.tensor(out.token_ids, dtype=torch.long)
            behavior[r, :c] = torch.tensor(out.logprobs)
            prompt_lens[r], completion_lens[r] = len(p), c
        self.tokens_generated += int(completion_lens.sum())
        return Rollout(tokens, prompt_lens, completion_lens, behavior, torch.zeros(n),
                       torch.tensor(example_ids, dtype=torch.long), policy_version, self.replica, chunk)
