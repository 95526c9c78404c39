"""Tiny in-process models for engine and generator tests (byte tokenizer, nothing downloaded):
a Llama forced to one next token, and a chunk generator over a few prompts."""
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.pipeline import chunk_config
from llamarl_core.executors.setup import PromptSet
from llamarl_core.generation import SamplingParams
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                 max_seq_len=64, rope_theta=10000.0)
TOK = ByteTokenizer()


def force_token(model, token_id):
    """Make every next-token distribution put all its mass on token_id; returns the model.

    Zeroed wo/w2 make every block add nothing, so the final hidden state is the embedding
    (all ones), RMS-normalised to all ones; logit[token_id] = 100 * dim (3200 at dim 32), others 0.
    """
    with torch.no_grad():
        model.tok_embeddings.weight.fill_(1.0)
        for layer in model.layers:
            layer.attention.wo.weight.zero_()
            layer.feed_forward.w2.weight.zero_()
        model.norm.weight.fill_(1.0)
        model.output.weight.zero_()
        model.output.weight[token_id] = 100.0
    return model


def prompts(n: int) -> list[list[int]]:
    """n short distinct prompts ("q0=", "q1=", ...), BOS first."""
    return [TOK.encode(f"q{i}=", add_bos=True) for i in range(n)]


def tiny_chunks(prompt_ids, *, max_new_tokens: int, max_batch_size: int, seed: int, stop_token_ids=()):
    """(cfg, ChunkGenerator): cpu_tiny at 2 prompts x 2 samples a step, prompts of at most 8
    tokens, replica 0 of 1 generating `prompt_ids` with an ARGS Llama made under torch seed
    `seed`, sampling at temperature 1."""
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2",
                                   f"generation.max_new_tokens={max_new_tokens}", "generation.max_prompt_tokens=8",
                                   f"resources.generator.max_batch_size={max_batch_size}"])
    torch.manual_seed(seed)
    chunks = ChunkGenerator(chunk_config(cfg), Llama(ARGS).eval().requires_grad_(False), TOK,
                            PromptSet(examples=[None] * len(prompt_ids), prompt_ids=prompt_ids), replica=0,
                            num_replicas=1)
    chunks.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0,
                                   stop_token_ids=tuple(stop_token_ids))
    return cfg, chunks
