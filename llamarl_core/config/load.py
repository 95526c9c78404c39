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
from llamarl_core.config.schema import LlamaRLConfig

DEFAULT_RECIPE = "cpu_tiny"
SCHEMA_NAME = "llamarl_schema"

ConfigStore.instance().store(name=SCHEMA_NAME, node=LlamaRLConfig)


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
        env_texts = _env_interpolations(OmegaConf.to_container(cfg, resolve=False))
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
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(_clean_message(e, resolve_recipe_path(recipe))) from None
    # (text, value resolved now): a field the run changes later (run.resume=auto → a path) is
    # written as changed, not as its text
    obj.__dict__[WRITTEN_AS] = {k: (text, OmegaConf.select(cfg, k)) for k, text in env_texts.items()}
    return obj


# The run uses the resolved value of `${oc.env:VAR}`; files written to disk (plan.json,
# config.yaml) keep the text as written, so a token in the environment never lands on disk.
# Workers rebuild the config from plan.json with OmegaConf, which resolves it from their own
# (inherited) environment.
WRITTEN_AS = "_llamarl_env_texts"


def env_texts(cfg: LlamaRLConfig) -> dict:
    """{dotted key: (`${oc.env:...}` text, resolved value)} for the fields load_config resolved
    from the environment."""
    return dict(getattr(cfg, "__dict__", {}).get(WRITTEN_AS, {}))


def _env_interpolations(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        found = {}
        for k, v in node.items():
            found.update(_env_interpolations(v, f"{prefix}{k}."))
        return found
    if isinstance(node, list):
        found = {}
        for i, v in enumerate(node):
            found.update(_env_interpolations(v, f"{prefix}{i}."))
        return found
    if isinstance(node, str) and "${oc.env:" in node:
        return {prefix[:-1]: node}
    return {}


def refuse_aliases(path: Path, seen: set | None = None) -> None:
    """Refuse YAML anchors and aliases in the recipe and the files its defaults list pulls in.

    OmegaConf copies every alias when it builds a node, so a 'billion laughs' file (ten
    aliases of ten aliases...) would hang every verb; recipes never need them. Scanning tokens
    is linear in the file's size and expands nothing, so this runs before any loader does.
    """
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return
    seen.add(path)
    try:
        with open(path, encoding="utf-8") as f:
            for token in yaml.scan(f):
                if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                    mark = token.start_mark
                    raise ConfigError(
                        f"recipe {path}, line {mark.line + 1}, column {mark.column + 1}: YAML "
                        f"{'alias' if isinstance(token, yaml.AliasToken) else 'anchor'} "
                        f"'{token.value}' refused (anchors and aliases are not allowed in "
                        "recipes; write the values out)")
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(yaml_message(e, path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read recipe {path}: {e}") from None
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    for entry in defaults if isinstance(defaults, list) else []:
        names = [entry] if isinstance(entry, str) else (
            [f"{k}/{v}" for k, v in entry.items()] if isinstance(entry, dict) else [])
        for name in names:
            refuse_aliases(path.parent / f"{str(name).lstrip('/')}.yaml", seen)


def _recipe_keys(path: Path) -> set:
    try:
        return set(OmegaConf.load(path).keys())
    except yaml.YAMLError as e:
        raise ConfigError(yaml_message(e, path)) from None
    except Exception as e:  # a YAML list or scalar, not a mapping
        raise ConfigError(f"cannot parse recipe {path}: {e}") from None


def yaml_message(e: yaml.YAMLError, path: Path) -> str:
    """'recipe FILE, line L, column C: problem' (YAML marks count from 0)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return f"cannot parse recipe {path}: {problem}"
    where = mark.name if mark.name and not mark.name.startswith("<") else str(path)
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and start is not None and start is not mark:
        context += f" that starts at line {start.line + 1}, column {start.column + 1}"
    return (f"cannot parse recipe {where}, line {mark.line + 1}, column {mark.column + 1}: {problem}"
            + (f" ({context})" if context else ""))


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
