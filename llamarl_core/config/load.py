"""Compose a recipe with Hydra, apply overrides, and bind it to the schema.

`recipe=NAME` picks `recipes/NAME.yaml` (shipped as the `llamarl_recipes` package) and
`recipe=path/to.yaml` a user's file; every other `key=value` word is a Hydra override.
Composition uses Hydra's compose API rather than `@hydra.main`, so the CLI keeps control of
argv, exit codes and error messages, and nothing changes the working directory.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.env_texts import env_interpolations, remember
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.yaml_files import refuse_aliases, yaml_message

DEFAULT_RECIPE = "cpu_tiny"
SCHEMA_NAME = "llamarl_schema"


def _schema_node() -> DictConfig:
    """The schema as Hydra composes it. Hydra closes every mapping to new keys (struct mode), so
    `data.chat_template_kwargs={enable_thinking: false}` would be an "unknown key": a chat
    template's variables are the template's names, not ours, so that one mapping stays open."""
    node = OmegaConf.structured(LlamaRLConfig)
    OmegaConf.set_struct(node.data.chat_template_kwargs, False)
    return node


ConfigStore.instance().store(name=SCHEMA_NAME, node=_schema_node())


def recipes_dir() -> Path:
    import llamarl_recipes
    return Path(llamarl_recipes.__file__).resolve().parent


def list_recipes() -> list[str]:
    return sorted(p.stem for p in recipes_dir().glob("*.yaml"))


def resolve_recipe_path(recipe: str) -> Path:
    """`NAME` → recipes/NAME.yaml; anything with a slash or .yaml suffix → a user's file."""
    if recipe.endswith((".yaml", ".yml")) or os.sep in recipe or "/" in recipe:
        path = Path(recipe).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"recipe file not found: {recipe}")
        return path
    path = recipes_dir() / f"{recipe}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown recipe {recipe!r}; built-in recipes: {', '.join(list_recipes())}")
    return path


def split_recipe_arg(words: Sequence[str]) -> tuple[str, list[str]]:
    """Separate `recipe=...` from the Hydra overrides."""
    recipe, overrides = DEFAULT_RECIPE, []
    for w in words:
        if w.startswith("recipe="):
            recipe = w.split("=", 1)[1]
        else:
            overrides.append(w)
    return recipe, overrides


def compose_config(recipe: str = DEFAULT_RECIPE, overrides: Sequence[str] = ()) -> DictConfig:
    """Hydra-compose `recipe` + overrides on top of the schema; raises ConfigError."""
    return _compose(recipe, overrides)[0]


def _compose(recipe: str, overrides: Sequence[str]) -> tuple[DictConfig, dict]:
    """The composed config, and {dotted key: its `${oc.env:...}` text as written}."""
    path = resolve_recipe_path(recipe)
    refuse_aliases(path)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.3",
                                   job_name="llamarl"):
            cfg = compose(config_name=path.stem, overrides=list(overrides))
        env_texts = env_interpolations(OmegaConf.to_container(cfg, resolve=False))
        # A user's file without `defaults: [llamarl_schema, _self_]` is still bound to the schema.
        # Merging a plain container also rejects keys that `+key=value` appended.
        cfg = OmegaConf.merge(OmegaConf.structured(LlamaRLConfig),
                              OmegaConf.to_container(cfg, resolve=True))
        if "recipe" not in _recipe_keys(path):
            cfg.recipe = path.stem
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(_clean_message(e, path)) from None
    except yaml.YAMLError as e:
        raise ConfigError(yaml_message(e, path)) from None
    finally:
        GlobalHydra.instance().clear()
    return cfg, env_texts


def load_config(recipe: str = DEFAULT_RECIPE, overrides: Sequence[str] = ()) -> LlamaRLConfig:
    """Compose and bind to dataclasses: unknown keys, wrong types and field checks fail here."""
    cfg, env_texts = _compose(recipe, overrides)
    _check_required(cfg, recipe)
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(_clean_message(e, resolve_recipe_path(recipe))) from None
    remember(obj, env_texts, cfg)
    return obj


def required_keys(recipe: str) -> list[str]:
    """The keys a recipe marks `???` (OmegaConf's "must be given"): recipe hf's model.checkpoint.
    Composition over the schema's default keeps the default, so the file itself is read."""
    path = resolve_recipe_path(recipe)
    return _missing_keys(OmegaConf.to_container(OmegaConf.load(path), resolve=False))


def _check_required(cfg: DictConfig, recipe: str) -> None:
    for key in required_keys(recipe):
        if OmegaConf.select(cfg, key) is None:
            raise ConfigError(f"recipe {resolve_recipe_path(recipe).stem} needs {key}: add {key}=... to the "
                              "command line" + (" (a Hugging Face checkpoint directory)"
                                                if key == "model.checkpoint" else ""))


def _missing_keys(node, prefix: str = "") -> list[str]:
    """Dotted keys whose value is `???` in a recipe's mapping."""
    if not isinstance(node, dict):
        return []
    return [key for k, v in node.items() for key in
            ([f"{prefix}{k}"] if v == "???" else _missing_keys(v, f"{prefix}{k}."))]


def _recipe_keys(path: Path) -> set:
    try:
        return set(OmegaConf.load(path).keys())
    except yaml.YAMLError as e:
        raise ConfigError(yaml_message(e, path)) from None
    except Exception as e:  # a YAML list or scalar, not a mapping
        raise ConfigError(f"cannot parse recipe {path}: {e}") from None


def _clean_message(e: Exception, path: Path) -> str:
    """One line a user can act on, from Hydra's and OmegaConf's multi-line messages."""
    cause = e
    while cause.__cause__ is not None and isinstance(cause.__cause__, (HydraException, OmegaConfBaseException)):
        cause = cause.__cause__
    text = str(cause).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    full_key = None
    for ln in lines:
        m = re.match(r"full_key:\s*(\S+)", ln)
        if m:
            full_key = m.group(1)
    head = lines[0] if lines else type(cause).__name__
    head = re.sub(r"\s+", " ", head)
    unknown = ("not in struct" in text or "ConfigKeyError" in text or "Could not override" in head
               or re.search(r"Key '[^']+' not in '", text))
    if unknown:
        key = full_key or _first_quoted(text)
        return f"unknown config key '{key}' (recipe {path.name}); check the spelling or see `llamarl plan --cfg job`"
    if full_key:
        return f"invalid value for '{full_key}' (recipe {path.name}): {head}"
    return f"{head} (recipe {path.name})"


def _first_quoted(text: str) -> str:
    m = re.search(r"'([^']+)'", text)
    return m.group(1) if m else "?"
