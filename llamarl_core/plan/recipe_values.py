"""What a run takes from its recipe: every value the recipe sets (unlike the schema's default)
that the command line did not override. `llamarl plan` and `train` list them, and plan.json
records them under `set_by_recipe`.

Why: `llamarl train model.checkpoint=DIR` without `recipe=` runs the default recipe, cpu_tiny,
whose values were tuned for a 2.5M-parameter byte-level model (130 warm-start steps teaching
arithmetic, lr 7e-5, a 200 s cap). Nothing said so; now the plan lists them and points to
`recipe=hf` when a Hugging Face checkpoint meets the toy's recipe.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from llamarl_core.config.load import DEFAULT_RECIPE, compose_config
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.models.tokenizer import BYTE_TOKENIZER_FILE

HF_RECIPE = "hf"
NOT_SET = object()


def set_by_recipe(recipe: str, overrides: Sequence[str], checkpoint: str | None = None) -> dict:
    """{"recipe", "values": {dotted key: value as written}, "advice": str | None}. `checkpoint`:
    the run's model.checkpoint; a Hugging Face one under the default recipe gets the advice."""
    composed = OmegaConf.to_container(compose_config(recipe), resolve=False)
    defaults = OmegaConf.to_container(OmegaConf.structured(LlamaRLConfig), resolve=False)
    schema = dict(_leaves(defaults))
    touched = [_override_key(w) for w in overrides]
    values = {key: value for key, value in _leaves(composed)
              if key != "recipe" and schema.get(key, NOT_SET) != value
              and not any(key == t or key.startswith(t + ".") for t in touched)}
    name = Path(recipe).stem
    advice = None
    if name == DEFAULT_RECIPE and checkpoint and "model.checkpoint" not in values and _is_hf(checkpoint):
        advice = (f"these are the toy model's values (recipe {DEFAULT_RECIPE}: a 2.5M-parameter byte-level "
                  f"Llama); for your own model use recipe={HF_RECIPE} (no warm start, no time cap, "
                  f"a pretrained model's learning rate): llamarl train recipe={HF_RECIPE} "
                  f"model.checkpoint={checkpoint}")
    shown = recipe if recipe.endswith((".yaml", ".yml")) or "/" in recipe else name  # a file: its path, not "recipe"
    return {"recipe": shown, "values": values, "advice": advice}


def describe(block: dict) -> str:
    """The block as one paragraph for people (empty when the recipe sets nothing)."""
    if not block["values"]:
        return ""
    pairs = ", ".join(f"{k}={_text(v)}" for k, v in block["values"].items())
    text = f"set by recipe {block['recipe']} (not on your command line): {pairs}"
    return text + (f"\n{block['advice']}" if block["advice"] else "")


def _leaves(node: Any, prefix: str = ""):
    """(dotted key, value) of every leaf; a list or an empty mapping is one value."""
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from _leaves(v, f"{prefix}{k}.")
    else:
        yield prefix[:-1], node


def _override_key(word: str) -> str:
    """`+a.b=c`, `++a.b=c`, `~a.b` → `a.b`."""
    return word.split("=", 1)[0].lstrip("+~")


def _is_hf(checkpoint: str) -> bool:
    """A Hugging Face checkpoint, not one of llamarl's byte-level tiny models (whose own warm
    start `model.checkpoint=<run>/checkpoints/warmstart` continues under cpu_tiny on purpose)."""
    return not (Path(checkpoint) / BYTE_TOKENIZER_FILE).is_file()


def _text(value: Any) -> str:
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
