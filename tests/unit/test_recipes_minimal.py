"""Recipes override only what differs: a key set to the value it would have anyway (the
schema default, or the parent recipe's value) is noise that hides the real choices."""
import pytest
from omegaconf import OmegaConf

from llamarl_core.config.load import SCHEMA_NAME, list_recipes, load_config, recipes_dir
from llamarl_core.config.schema import LlamaRLConfig


def leaves(node, prefix=""):
    for key, value in node.items():
        if key == "defaults":
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from leaves(value, path + ".")
        else:
            yield path, value


def base_of(recipe: str):
    """What the recipe composes on: the schema, or the recipe it names in `defaults`."""
    raw = OmegaConf.to_container(OmegaConf.load(recipes_dir() / f"{recipe}.yaml"))
    parents = [d for d in raw.get("defaults", []) if d not in (SCHEMA_NAME, "_self_")]
    base = load_config(parents[0]) if parents else LlamaRLConfig()
    return raw, OmegaConf.structured(base)


@pytest.mark.parametrize("recipe", list_recipes())
def test_a_recipe_sets_no_key_to_the_value_it_already_has(recipe):
    raw, base = base_of(recipe)
    repeated = [f"{k}={v}" for k, v in leaves(raw) if OmegaConf.select(base, k) == v]
    assert repeated == [], f"recipes/{recipe}.yaml repeats what it composes on: {repeated}"
