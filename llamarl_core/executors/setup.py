"""Build what every role needs from the config: model, tokenizer, examples, prompts.

All roles call these with the same config and seed, so they agree on the initial weights,
the example list and which prompts make up chunk n — without sending any of it.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from llamarl_core.config.schema import DataConfig, GenerationConfig, ModelConfig
from llamarl_core.data import Example, default_reward, prompt_format
from llamarl_core.data.splits import load_split, split_path  # noqa: F401 (the roles' names for them)
from llamarl_core.eval import encode_prompt  # the one place a prompt becomes token ids
from llamarl_core.models import ByteTokenizer, Llama, build_empty, get_preset, load_pretrained, load_tokenizer
from llamarl_core.models.dtypes import TORCH_DTYPES
from llamarl_core.models.meta import meta_device


def build_model(model_cfg: ModelConfig, dtype: str, device: str = "cpu", *, seed: int):
    """(model, tokenizer): the checkpoint if given, else a seeded random init of the preset.

    `dtype` is the role's own (`resources.generator.dtype` or `resources.trainer.dtype`);
    `device` the rank's (a checkpoint is materialised there directly). The preset init runs
    on the CPU, so every device starts from the same seeded weights (`seed`: run.seed)."""
    torch_dtype = TORCH_DTYPES[dtype]
    if model_cfg.checkpoint:
        return load_pretrained(model_cfg.checkpoint, dtype=torch_dtype, device=device)
    torch.manual_seed(seed)
    model = Llama(get_preset(model_cfg.preset)).to(device=device, dtype=torch_dtype)
    return model, ByteTokenizer()


def tokenizer_of(model_cfg: ModelConfig):
    """The model's tokenizer: its checkpoint's, or the byte tokenizer of a preset."""
    return load_tokenizer(model_cfg.checkpoint) if model_cfg.checkpoint else ByteTokenizer()


def build_meta_model(model_cfg: ModelConfig, dtype: str):
    """(model on the meta device, tokenizer): shapes only, for a role whose weights all arrive
    over the weight sync (the generators receive version 0 before they generate)."""
    if model_cfg.checkpoint:
        model, _ = build_empty(model_cfg.checkpoint, device="meta")
        tokenizer = load_tokenizer(model_cfg.checkpoint, required=False)
    else:
        with meta_device():  # no init on meta: it would import torch._dynamo (models/meta.py)
            model, tokenizer = Llama(get_preset(model_cfg.preset)), ByteTokenizer()
    return model.to(dtype=TORCH_DTYPES[dtype]), tokenizer


def materialize_zeros(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """Allocate a meta model's (possibly TP-sliced) parameters on `device`, zero-filled."""
    tied = model.output.weight is model.tok_embeddings.weight
    model.to_empty(device=device)
    if tied:  # to_empty gives the two names separate storage; one weight again
        model.output.weight = model.tok_embeddings.weight
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def reward_name(data: DataConfig) -> str:
    """`data.reward`, or the data set's built-in verifier (generic data has none: NoVerifier)."""
    return data.reward if data.reward != "auto" else default_reward(data.name)


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
