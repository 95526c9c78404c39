"""`llamarl export`: a run's checkpoint as a Hugging Face directory transformers loads.

    llamarl export runs/x/checkpoints/step_50 out/step_50 [export.dtype=bfloat16]
    llamarl export runs/x/checkpoints/final out/final-bf16 export.dtype=bfloat16
    llamarl export runs/lora/checkpoints/step_50 out/adapter          # a PEFT adapter
    llamarl export runs/lora/checkpoints/step_50 out/merged --merged  # base + s·B@A
    llamarl export out/adapter out/merged --merged model.checkpoint=BASE

A `step_<N>` (the trainer's resumable DCP shards) becomes safetensors, the family's
config.json, and the source's tokenizer, chat template and generation_config.json; a Hugging
Face directory (`checkpoints/final`, `checkpoints/warmstart`) is rewritten in another dtype.
`export.dtype` defaults to the run's own (its config.yaml, two levels up); `auto` is the
dtype of the model the run started from (`model.checkpoint`'s config.json; float32 for a
preset). The work is `llamarl_core.models.export`; this file reads the run and sets exit codes.
A LoRA run's step holds only its adapters: it becomes a PEFT adapter directory
(adapter_config.json + adapter_model.safetensors, float32 under `auto`, as PEFT keeps adapters),
or with --merged a Hugging Face directory of the run's `model.checkpoint` with W + s·B@A in
each targeted projection. Rank, alpha and targets come from the step's state.json (`lora`),
else the run's `model.lora`. A PEFT adapter directory merges too (--merged), onto
`model.checkpoint=BASE` or its own base_model_name_or_path when that is a local directory.
Bad input (not a checkpoint, an unfinished or truncated one, OUT_DIR not empty) is one line
and exit 2, with nothing written.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from llamarl_cli.common import EXIT_OK, Parser, UsageError, run_guarded
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import ExportConfig, LoraConfig
from llamarl_core.config.yaml_files import refuse_aliases

DTYPE_KEY, BASE_KEY = "export.dtype", "model.checkpoint"


def split_words(prog: str, words: list[str]) -> tuple[Path, Path, dict[str, str]]:
    """(SRC, OUT_DIR, {export.dtype / model.checkpoint: the last word's value}) out of the words."""
    paths = [w for w in words if "=" not in w]
    settings = dict(w.split("=", 1) for w in words if "=" in w)
    other = [k for k in settings if k not in (DTYPE_KEY, BASE_KEY)]
    if other:
        raise UsageError(f"{prog}: only {DTYPE_KEY}=... and {BASE_KEY}=... are read here, got {', '.join(other)}")
    if len(paths) != 2:
        raise UsageError(f"{prog}: expected CHECKPOINT OUT_DIR, got {len(paths)} path(s): {' '.join(paths)}")
    return Path(paths[0]), Path(paths[1]), settings


def run_settings(src: Path) -> tuple[Path | None, dict]:
    """The run's config.yaml beside `<run>/checkpoints/<name>` (or None) and its
    `export.dtype`, `model.checkpoint` and `model.lora`, read without resolving anything else."""
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
    return config, {"dtype": export.get("dtype", ExportConfig.dtype), "checkpoint": model.get("checkpoint"),
                    "lora": model.get("lora")}


def resolve_dtype(src: Path, word: str | None, kind: str, config: Path | None = None, run: dict | None = None,
                  base: Path | None = None):
    """The torch dtype to write: the word, else the run's export.dtype; `auto` is the run's
    model.checkpoint's dtype (a Hugging Face directory outside a run: its own; a merged
    adapter: its base's; an adapter: float32)."""
    from llamarl_core.models.export import export_dtype

    if run is None:
        config, run = run_settings(src) if word in (None, "auto") else (None, {})  # a dtype named: no run read
    name = ExportConfig(dtype=word if word is not None else run.get("dtype", ExportConfig.dtype)).dtype
    if name != "auto" or kind == "adapter":
        return export_dtype("float32" if name == "auto" else name, None)
    if base is not None:
        config, run = None, {"checkpoint": base}
    elif config is None and kind == "step":
        raise ConfigError(f"{DTYPE_KEY}=auto: no run config.yaml two levels above {src} to say which "
                          f"model the run started from; pass {DTYPE_KEY}=bfloat16|float16|float32")
    source = run.get("checkpoint") if config is not None or base is not None else src
    try:
        return export_dtype(name, source)
    except (ValueError, OSError) as e:
        where = f"model.checkpoint={source} of {config}: " if config is not None else ""
        raise ConfigError(f"{DTYPE_KEY}=auto: {where}{e}; pass {DTYPE_KEY}=bfloat16|float16|float32") from None


def check_source(src: Path) -> str:
    """What `src` is: "step" (a run's step_<N>), "lora_step" (a LoRA run's: adapters only),
    "hf" (a Hugging Face directory) or "peft" (a PEFT adapter directory); else exit 2."""
    from llamarl_core.checkpoint.checkpoints import STABLE, is_stable
    from llamarl_core.models.export import is_lora_step
    from llamarl_core.models.peft_io import CONFIG_FILE
    from llamarl_core.models.step_checkpoint import is_step_checkpoint

    if is_step_checkpoint(src):
        if not is_stable(str(src)):
            raise ConfigError(f"{src} has no {STABLE} marker: the trainer did not finish writing it "
                              f"(export an older step_<N>)")
        return "lora_step" if is_lora_step(src) else "step"
    if (src / CONFIG_FILE).is_file():
        return "peft"
    if (src / "config.json").is_file():
        return "hf"
    raise ConfigError(f"{src} is not a checkpoint: expected a run's checkpoints/step_<N> (with "
                      f"trainer/.metadata), a Hugging Face directory (config.json + model.safetensors) "
                      f"or a PEFT adapter (adapter_config.json)")


def step_spec(src: Path, config: Path | None, run: dict, base):
    """The AdapterSpec of a LoRA run's step: its state.json's `lora`, else the run's model.lora."""
    from llamarl_core.checkpoint.checkpoints import read_state
    from llamarl_core.models.peft_io import AdapterSpec

    try:
        fields, where = read_state(str(src)).get("lora"), src / "state.json"
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(fields, dict):
        fields, where = run.get("lora"), f"model.lora of {config}"
    if not isinstance(fields, dict) or not fields.get("rank"):
        raise ConfigError(f"{src} holds LoRA adapters, but neither its state.json nor a run config.yaml two "
                          f"levels up gives their rank and alpha (model.lora)")
    try:
        lora = LoraConfig(**{k: fields[k] for k in ("rank", "alpha", "dropout", "target_modules") if k in fields})
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None
    return AdapterSpec(lora.rank, lora.alpha, lora.dropout, tuple(lora.target_modules), base)


def export_lora(src: Path, out: Path, kind: str, merged: bool, words: dict) -> tuple[str, object]:
    """A LoRA step as a PEFT adapter, or a LoRA step / PEFT adapter merged into its base.
    Returns (what was written, dtype)."""
    from llamarl_core.models.export import export_adapter, export_checkpoint, step_adapters
    from llamarl_core.models.peft_io import read_adapter

    config, run = run_settings(src)
    base = words.get(BASE_KEY) or run.get("checkpoint")
    if kind == "peft":
        spec, tensors = read_adapter(src)
        base = words.get(BASE_KEY) or spec.base_model
    else:
        spec, tensors = step_spec(src, config, run, base), None
    if not merged:
        export_adapter(src, out, spec, resolve_dtype(src, words.get(DTYPE_KEY), "adapter", config, run))
        return "a PEFT adapter", f"peft.PeftModel.from_pretrained(<{base or 'the base model'}>, {str(out)!r})"
    if not base or not (Path(base) / "config.json").is_file():
        raise ConfigError(f"--merged needs the base model as a local Hugging Face directory, not {base!r}: "
                          f"pass {BASE_KEY}=BASE")
    dtype = resolve_dtype(src, words.get(DTYPE_KEY), "merged", config, run, base=Path(base))
    export_checkpoint(base, out, dtype, lora=(spec, tensors if tensors is not None else step_adapters(src)))
    return f"{base} merged with the adapters ({str(dtype).removeprefix('torch.')})", \
        f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})"


def main(argv) -> int:
    parser = Parser(prog="llamarl export", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                     usage="llamarl export CHECKPOINT OUT_DIR [--merged] [export.dtype=auto|bfloat16|float16|float32] "
                           "[model.checkpoint=BASE]",
                     epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("words", nargs="*", metavar="CHECKPOINT OUT_DIR [export.dtype=...]")
    parser.add_argument("--merged", action="store_true",
                        help="a LoRA step or PEFT adapter: write base + s·B@A as a Hugging Face directory")

    def run() -> int:
        args, unknown = parser.parse_known_intermixed_args(list(argv))
        if unknown:
            raise UsageError(f"{parser.prog}: unknown option(s) {' '.join(unknown)}; see --help")
        src, out, words = split_words(parser.prog, args.words)
        kind = check_source(src)
        lora = kind in ("lora_step", "peft")
        if args.merged and not lora:
            raise UsageError(f"{parser.prog}: --merged merges a LoRA step or a PEFT adapter into its base; "
                             f"{src} is a whole model already")
        if kind == "peft" and not args.merged:
            raise UsageError(f"{parser.prog}: {src} is a PEFT adapter already; --merged writes it merged into its base")
        if BASE_KEY in words and not lora:
            raise UsageError(f"{parser.prog}: {BASE_KEY}=... names the base of a LoRA step or PEFT adapter only")
        dtype = None if lora else resolve_dtype(src, words.get(DTYPE_KEY), kind)
        from llamarl_core.models.export import export_checkpoint

        try:
            if lora:
                what, how = export_lora(src, out, kind, args.merged, words)
            else:
                export_checkpoint(src, out, dtype)
                what, how = (str(dtype).removeprefix("torch."),
                             f"transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
        except ConfigError:
            raise
        except (ValueError, KeyError, FileNotFoundError, FileExistsError) as e:
            text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
            raise ConfigError(f"export {src}: {text}") from None
        print(f"exported {src} to {out} ({what}); load it with {how}")
        return EXIT_OK

    return run_guarded(run)
