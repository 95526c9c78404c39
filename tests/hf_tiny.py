"""Tiny random Hugging Face checkpoints, one per model family, built and saved by `transformers`.

    from hf_tiny import FAMILIES, save_tiny
    path = save_tiny("qwen2.5", tmp_path / "qwen")      # config.json, model.safetensors,
                                                        # generation_config.json, tokenizer
    hf = transformers.AutoModelForCausalLM.from_pretrained(path)   # the reference

Importable from any test module (`tests/` is on sys.path through tests/conftest.py, pytest's
rootdir conftest). Each directory is a complete HF checkpoint: weights written by the
family's own `*ForCausalLM.save_pretrained` and a byte-level BPE tokenizer (256 byte tokens,
no merges, plus `<pad>` `<s>` `</s>`) built in-process with the `tokenizers` library and
saved with `PreTrainedTokenizerFast.save_pretrained`. Nothing is downloaded.

The weights are random but not transformers' near-zero init: linears at std 0.1, norms in
[0.5, 1.5], biases at std 0.5, so logits are peaked (greedy decoding has no near-ties) and a
wrong norm, bias or head mapping cannot hide behind ones and zeros.

    family     what it exercises
    llama3     Llama-3.1 rope scaling (llama3), GQA, untied head
    smollm2    Llama with tied embeddings and plain RoPE (SmolLM2, Llama-3.2 style)
    qwen2.5    q/k/v biases, tied embeddings, rope_theta 1e6
    qwen3      per-head q/k RMSNorm, head_dim 32 != hidden 64 / 4 heads
    mistral    Mistral without sliding window
"""
from __future__ import annotations

from pathlib import Path

import torch

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
VOCAB_SIZE = 272  # the tokenizer's 259 tokens plus unused rows, as real checkpoints pad theirs
_COMMON = dict(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
               rms_norm_eps=1e-5, initializer_range=0.1, pad_token_id=256, bos_token_id=257,
               eos_token_id=258)
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama3": ("LlamaConfig", dict(tie_word_embeddings=False, rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    "smollm2": ("LlamaConfig", dict(tie_word_embeddings=True,
                                    rope_parameters={"rope_type": "default", "rope_theta": 100000.0})),
    "qwen2.5": ("Qwen2Config", dict(tie_word_embeddings=True, use_sliding_window=False, sliding_window=64,
                                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen3": ("Qwen3Config", dict(tie_word_embeddings=False, head_dim=32,
                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "mistral": ("MistralConfig", dict(tie_word_embeddings=False, sliding_window=None,
                                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}


def tiny_tokenizer(chat_template: str | None = None):
    """A `PreTrainedTokenizerFast` over UTF-8 bytes: ids 0-255 the byte-level alphabet, then
    <pad>=256, <s>=257, </s>=258 (the ids the tiny configs name)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)} | {PAD: 256, BOS: 257, EOS: 258}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([PAD, BOS, EOS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    if chat_template is not None:
        fast.chat_template = chat_template
    return fast


def tiny_config(family: str, **overrides):
    """The family's transformers config at tiny size (`overrides` go to the config class)."""
    import transformers

    cls_name, extra = FAMILIES[family]
    return getattr(transformers, cls_name)(**{**_COMMON, **extra, **overrides})


def tiny_model(family: str, seed: int = 0, **overrides):
    """A random `*ForCausalLM` of the family (eval mode, float32)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **overrides), dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def save_tiny(family: str, path, seed: int = 0, chat_template: str | None = None, **overrides) -> Path:
    """Build a tiny random model of `family` and save it with its tokenizer as a complete
    Hugging Face checkpoint directory at `path`; returns the path."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # no "Writing model shards" bars in the tests' output
    path = Path(path)
    tiny_model(family, seed, **overrides).save_pretrained(path)
    tiny_tokenizer(chat_template).save_pretrained(path)
    return path
