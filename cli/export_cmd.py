"""`llamarl export`: a run's checkpoint as a Hugging Face directory transformers loads.

    llamarl export runs/x/checkpoints/step_50 out/step_50 [export.dtype=bfloat16]
    llamarl export runs/x/checkpoints/final out/final-bf16 export.dtype=bfloat16

A `step_<N>` (the trainer's resumable DCP shards) becomes safetensors, the family's
config.json, and the source's tokenizer, chat template and generation_config.json; a Hugging
Face directory (`checkpoints/final`, `checkpoints/warmstart`) is rewritten in another dtype.
`export.dtype` defaults to the run's own (its config.yaml, two levels up); `auto` is the
dtype of the model the run started from (`model.checkpoint`'s config.json; float32 for a
preset). The work is `llamarl_core.models.export`; this file reads the run and sets exit codes.
Bad input (not a checkpoint, an unfinished or truncated one, OUT_DIR not empty) is one line
and exit 2, with nothing written.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from llamarl_cli.common import EXIT_OK, Parser, UsageError, run_guarded
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import ExportConfig
from llamarl_core.config.yaml_files import refuse_aliases

DTYPE_KEY = "export.dtype"


def split_words(prog: str, words: list[str]) -> tuple[Path, Path, str | None]:
    """(SRC, OUT_DIR, the export.dtype word's value or None) out of the command's words."""
    paths = [w for w in words if "=" not in w]
    settings = [w.partition("=") for w in words if "=" in w]
    other = [k for k, _, _ in settings if k != DTYPE_KEY]
    if other:
        raise UsageError(f"{prog}: only {DTYPE_KEY}=... is read here, got {', '.join(other)}")
    if len(paths) != 2:
        raise UsageError(f"{prog}: expected CHECKPOINT OUT_DIR, got {len(paths)} path(s): {' '.join(paths)}")
    return Path(paths[0]), Path(paths[1]), (settings[-1][2] if settings else None)


def run_settings(src: Path) -> tuple[Path | None, dict]:
    """The run's config.yaml beside `<run>/checkpoints/<name>` (or None) and its
    `export.dtype` and `model.checkpoint`, read without resolving anything else."""
    src = src.resolve()
    config = src.parent.parent / "config.yaml"
    if src.parent.name != "checkpoints" or not config.is_file():
        return None, {}
    refuse_aliases(config)
    try:
        doc = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{config}: cannot read the run's config ({e})") from None
    export, model = (doc.get(k) if isinstance(doc, dict) and isinstance(doc.get(k), dict) else {}
                     for k in ("export", "model"))
    return config, {"dtype": export.get("dtype", ExportConfig.dtype), "checkpoint": model.get("checkpoint")}


def resolve_dtype(src: Path, word: str | None, is_step: bool):
    """The torch dtype to write: the word, else the run's export.dtype; `auto` is the run's
    model.checkpoint's dtype (a Hugging Face directory outside a run: its own)."""
    from llamarl_core.models.export import export_dtype

    config, run = run_settings(src) if word in (None, "auto") else (None, {})  # a dtype named: no run read
    name = ExportConfig(dtype=word if word is not None else run.get("dtype", ExportConfig.dtype)).dtype
    if name != "auto":
        return export_dtype(name, None)
    if config is None and is_step:
        raise ConfigError(f"{DTYPE_KEY}=auto: no run config.yaml two levels above {src} to say which "
                          f"model the run started from; pass {DTYPE_KEY}=bfloat16|float16|float32")
    source = run.get("checkpoint") if config is not None else src
    try:
        return export_dtype(name, source)
    except (ValueError, OSError) as e:
        where = f"model.checkpoint={source} of {config}: " if config is not None else ""
        raise ConfigError(f"{DTYPE_KEY}=auto: {where}{e}; pass {DTYPE_KEY}=bfloat16|float16|float32") from None


def check_source(src: Path) -> bool:
    """Whether `src` is a step_<N> (True) or a Hugging Face directory (False); else exit 2."""
    from llamarl_core.checkpoint.checkpoints import STABLE, is_stable
    from llamarl_core.models.step_checkpoint import is_step_checkpoint

    if is_step_checkpoint(src):
        if not is_stable(str(src)):
            raise ConfigError(f"{src} has no {STABLE} marker: the trainer did not finish writing it "
                              f"(export an older step_<N>)")
        return True
    if (src / "config.json").is_file():
        return False
    raise ConfigError(f"{src} is not a checkpoint: expected a run's checkpoints/step_<N> (with "
                      f"trainer/.metadata) or a Hugging Face directory (config.json + model.safetensors)")


def main(argv) -> int:
    parser = Parser(prog="llamarl export", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                     usage="llamarl export CHECKPOINT OUT_DIR [export.dtype=auto|bfloat16|float16|float32]",
                     epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", nargs="*", metavar="CHECKPOINT OUT_DIR [export.dtype=...]")

    def run() -> int:
        args, unknown = parser.parse_known_intermixed_args(list(argv))
        if unknown:
            raise UsageError(f"{parser.prog}: unknown option(s) {' '.join(unknown)}; see --help")
        src, out, word = split_words(parser.prog, args.words)
        is_step = check_source(src)
        dtype = resolve_dtype(src, word, is_step)
        from llamarl_core.models.export import export_checkpoint

        try:
            export_checkpoint(src, out, dtype)
        except (ValueError, KeyError, FileNotFoundError, FileExistsError) as e:
            text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ConfigError(f"export {src}: {text}") from None
        print(f"exported {src} to {out} ({str(dtype).removeprefix('torch.')}); load it with "
              f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
        return EXIT_OK

    return run_guarded(run)
