"""A GGUF file as an ordinary Hugging Face checkpoint, through transformers' GGUF reader, and
the check that the written directory is one.

`import_gguf(FILE.gguf, OUT_DIR)` writes `model.safetensors`, `config.json`,
`generation_config.json`, the tokenizer (`tokenizer.json`, `tokenizer_config.json`), its chat
template (`chat_template.jinja`) and `import_gguf.json` (the source file and its sha256). The
weights are the GGUF's **dequantized** values (for SmolLM2-135M-Instruct.Q4_1.gguf: 4-bit
blocks with a per-block scale and minimum, expanded to `dtype`), not the original bf16
release: the same network llama.cpp runs, a little off the published one.

Why not save the GGUF-loaded model as it is: transformers records `quantization_config =
{"quant_method": "gguf"}` in its config, and a checkpoint carrying it is treated as quantized
(the Trainer refuses to fine-tune it). The weights are moved into a model built from the plain
config, so OUT_DIR loads and trains in transformers (and here) like any other.

`check_imported(OUT_DIR)` then loads what was written the way a run does: config against the
safetensors headers, the tokenizer, the chat template, one forward pass with finite logits.
Used by `llamarl models get` and `scripts/import_gguf.py`.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import json
from pathlib import Path

import torch

from llamarl_core.config.choices import DTYPES
from llamarl_core.models.dtypes import TORCH_DTYPES

CHECK_MESSAGES = [{"role": "user", "content": "What is 12 times 7?"}]


def import_gguf(gguf_file: str | Path, out_dir: str | Path, dtype: str = "float32",
                source: str | None = None) -> Path:
    """Convert `gguf_file` into the checkpoint directory `out_dir`; returns `out_dir`.
    `source` (default: the file's path) is what `import_gguf.json` records as its origin."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file, out_dir = Path(gguf_file).resolve(), Path(out_dir)
    if not gguf_file.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_file}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    where, name = str(gguf_file.parent), gguf_file.name
    with _parse_once():
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        config = AutoConfig.from_pretrained(where, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config, dtype=torch.float32)
    config = copy.deepcopy(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = TORCH_DTYPES[dtype]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=config.dtype)
    model.load_state_dict({k: v.to(config.dtype) for k, v in loaded.state_dict().items()},
                          strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    written = json.loads((out_dir / "config.json").read_text())
    if "quantization_config" in written:  # the point of this conversion; never ship one
        raise RuntimeError(f"{out_dir / 'config.json'} still has a quantization_config")
    (out_dir / "import_gguf.json").write_text(json.dumps({
        "source": source or str(gguf_file), "gguf_file": name, "sha256": sha256_file(gguf_file), "dtype": dtype,
        "note": "weights are the GGUF's dequantized values, not the original release"}, indent=2) + "\n")
    return out_dir


def check_imported(out_dir: str | Path) -> dict:
    """Raise ValueError naming the part that fails: config.json against the safetensors
    headers, the tokenizer, its chat template, or the logits of one forward pass on the
    rendered chat prompt. Returns {"num_params", "prompt_tokens"} of what was checked."""
    from .checkpoint import load_pretrained
    from .checkpoint_check import check_checkpoint

    out_dir = Path(out_dir)
    try:
        check_checkpoint(out_dir)
    except (KeyError, FileNotFoundError) as e:
        raise ValueError(f"weights do not match config.json: {e}") from None
    model, tokenizer = load_pretrained(out_dir, dtype=torch.float32)
    try:
        ids = tokenizer.encode(tokenizer.apply_chat_template(CHECK_MESSAGES))
    except Exception as e:  # noqa: BLE001 - a template is user data; any failure is its fault
        raise ValueError(f"the chat template in {out_dir} does not render: {type(e).__name__}: {e}") from None
    if not ids:
        raise ValueError(f"the tokenizer in {out_dir} encodes the rendered chat prompt to no tokens")
    with torch.no_grad():
        logits = model.eval()(torch.tensor([ids]))  # [1, T, V]
    if not torch.isfinite(logits).all():
        bad = int((~torch.isfinite(logits)).sum())
        raise ValueError(f"{bad} of {logits.numel()} logits of {out_dir} are not finite on a chat prompt")
    return {"num_params": sum(p.numel() for p in model.parameters()), "prompt_tokens": len(ids)}


@contextlib.contextmanager
def _parse_once():
    """transformers reads the GGUF file three times (tokenizer, config, weights: each a Python
    parse of ~100k vocabulary strings) and rebuilds gguf's tensor-name table once per module
    (~400 times for SmolLM2); together ~60% of the conversion. Both are pure functions of
    their arguments and read-only after, so each is built once here. transformers imports
    them from `gguf` when it calls them; should it stop, this only stops saving time."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=None)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
