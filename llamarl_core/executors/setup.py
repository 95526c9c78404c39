"""Build what every role needs from the config: examples, prompts, the reward's name (the
model and tokenizer: models/build.py).

All roles call these with the same config and seed, so they agree on the initial weights,
the example list and which prompts make up chunk n — without sending any of it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from llamarl_core.config.schema import DataConfig, GenerationConfig
from llamarl_core.data import Example, default_reward, prompt_format
from llamarl_core.data.splits import load_split, split_path  # noqa: F401 (the roles' names for them)
from llamarl_core.eval import encode_prompt  # the one place a prompt becomes token ids


def reward_name(data: DataConfig) -> str:
    """`data.reward`, or the data set's built-in verifier (generic data has none: NoVerifier)."""
    return data.reward if data.reward != "auto" else default_reward(data.name)


def reward_terms(data: DataConfig) -> list[tuple[str, str, float]]:
    """The training reward's terms, (metric name, reward spec, weight) each: `data.rewards` (an
    `auto` fn resolved like `data.reward`), or `data.reward` alone with weight 1."""
    if not data.rewards:
        return [(reward_name(data), reward_name(data), 1.0)]
    auto = lambda fn: fn if fn != "auto" else default_reward(data.name)  # noqa: E731
    return [(t.label(), auto(t.fn), float(t.weight)) for t in data.rewards]


@dataclass
class PromptSet:
    examples: list[Example]
    prompt_ids: list[list[int]]

    def __len__(self) -> int:
        return len(self.examples)

    def table(self, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids [E, longest] right-padded with `pad_id`, lengths [E]): every prompt as a tensor,
        built once per run; a chunk's rows are an index into it."""
        cached = getattr(self, "_table", None)
        if cached is None or cached[0] != pad_id:
            lengths = torch.tensor([len(p) for p in self.prompt_ids], dtype=torch.long)
            ids = torch.full((len(self.prompt_ids), int(lengths.max()) if len(lengths) else 1), pad_id,
                             dtype=torch.long)
            for r, p in enumerate(self.prompt_ids):
                ids[r, :len(p)] = torch.as_tensor(p, dtype=torch.long)
            cached = self._table = (pad_id, ids, lengths)
        return cached[1], cached[2]


def encode_prompts(data: DataConfig, generation: GenerationConfig, examples: list[Example],
                   tokenizer) -> PromptSet:
    """Render and tokenize; prompts longer than generation.max_prompt_tokens are an error that
    names how many are, the longest, and where it is."""
    fmt = prompt_format(data)
    ids = [encode_prompt(ex, fmt, tokenizer) for ex in examples]
    limit = generation.max_prompt_tokens
    over = [i for i, toks in enumerate(ids) if len(toks) > limit]
    if over:
        longest = max(over, key=lambda i: len(ids[i]))
        ex = examples[longest]
        raise ValueError(f"generation.max_prompt_tokens={limit}: {len(over)} of {len(examples)} prompts "
                         f"are longer; the longest has {len(ids[longest])} tokens (example {ex.id}"
                         f"{', ' + ex.where if ex.where else ''}); raise generation.max_prompt_tokens "
                         f"or shorten the prompts")
    return PromptSet(examples, ids)


def chunk_prompt_indices(num_examples: int, chunk: int, prompts_per_step: int, seed: int) -> list[int]:
    """The P example indices of chunk n: consecutive slices of per-epoch seeded permutations."""
    out: list[int] = []
    start = chunk * prompts_per_step
    while len(out) < prompts_per_step:
        epoch, offset = divmod(start + len(out), num_examples)
        perm = list(range(num_examples))
        random.Random(f"{seed}:{epoch}").shuffle(perm)
        out.extend(perm[offset: offset + prompts_per_step - len(out)])
    return out
