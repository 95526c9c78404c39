"""The Llama-architecture model (Llama, Qwen2/2.5, Qwen3, Mistral), Hugging Face and step
checkpoints, tokenizers and the temperature rule of every log-prob."""
from .args import BYTE_VOCAB_SIZE, PRESETS, ModelArgs, get_preset, with_overrides
from .checkpoint import (build_empty, checkpoint_tensors, load_pretrained, save_model_files, save_pretrained,
                         save_streamed)
from .llama import Llama
from .tokenizer import ByteTokenizer, HFTokenizer, has_tokenizer, load_tokenizer

__all__ = ["BYTE_VOCAB_SIZE", "PRESETS", "ModelArgs", "get_preset", "with_overrides",
           "build_empty", "checkpoint_tensors", "load_pretrained", "save_model_files", "save_pretrained", "save_streamed", "Llama",
           "ByteTokenizer", "HFTokenizer", "has_tokenizer", "load_tokenizer"]
