"""Write your own GGUF file as an ordinary Hugging Face checkpoint, and check it.

    python scripts/import_gguf.py FILE.gguf OUT_DIR [--dtype float32|bfloat16|float16]

The conversion and the check are llamarl_core/models/gguf_import.py's (its docstring says what
OUT_DIR holds and why the weights are dequantized). The real model the recipes use is fetched
by one verb instead: `llamarl models get smollm2-135m models/smollm2-135m`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from llamarl_core.models.gguf_import import DTYPES, check_imported, import_gguf


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf_file", help="a .gguf file")
    p.add_argument("out_dir")
    p.add_argument("--dtype", default="float32", choices=DTYPES,
                   help="dtype of the written weights (default float32: the dequantized values exactly)")
    args = p.parse_args(argv)
    if not Path(args.gguf_file).is_file():
        hint = " (the real SmolLM2: llamarl models get smollm2-135m OUT_DIR)" if args.gguf_file == "smollm2" else ""
        print(f"import_gguf: error: GGUF file not found: {args.gguf_file}{hint}", file=sys.stderr)
        return 2
    try:
        out = import_gguf(args.gguf_file, args.out_dir, args.dtype)
        checked = check_imported(out)
    except (FileNotFoundError, ValueError, ImportError) as e:
        print(f"import_gguf: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out} (weights dequantized from {Path(args.gguf_file).name}, "
          f"{checked['num_params']:,} parameters, checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
