"""Recipes compose, overrides apply, and bad input names the key."""
import pytest

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import list_recipes, load_config, required_keys
from llamarl_core.config.schema import LlamaRLConfig


@pytest.mark.parametrize("recipe", list_recipes())
def test_every_recipe_composes_into_the_schema(recipe):
    cfg = load_config(recipe, [f"{key}=given" for key in required_keys(recipe)])  # recipe hf: model.checkpoint
    assert isinstance(cfg, LlamaRLConfig)
    assert cfg.recipe == recipe


def test_every_recipe_opens_with_a_header_naming_purpose_hardware_and_launch():
    from llamarl_core.config.load import recipes_dir
    for path in recipes_dir().glob("*.yaml"):
        head = path.read_text().split("defaults:")[0]
        for word in ("Hardware:", "Launch:"):
            assert word in head, f"{path.name} header lacks {word}"


def test_default_recipe_is_the_small_cpu_one():
    cfg = load_config()
    assert cfg.recipe == "cpu_tiny" and cfg.resources.device == "cpu"


def test_overrides_reach_contract_keys():
    cfg = load_config("cpu_tiny", ["resources.generator.quantization=int8", "algorithm.rho=2.5",
                                    "algorithm.max_offpolicy_steps=0", "run.seed=7", "run.dir=/tmp/x"])
    assert cfg.resources.generator.quantization == "int8"
    assert cfg.algorithm.rho == 2.5 and cfg.algorithm.max_offpolicy_steps == 0
    assert cfg.run.seed == 7 and cfg.run.dir == "/tmp/x"


def test_a_users_recipe_file_is_bound_to_the_schema(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  preset: tiny-20m\nalgorithm:\n  group_size: 4\n")
    cfg = load_config(str(path))
    assert cfg.model.preset == "tiny-20m" and cfg.algorithm.group_size == 4 and cfg.recipe == "mine"


@pytest.mark.parametrize("override, words", [
    (["resources.trainer.fsdpp=2"], ["unknown config key", "resources.trainer.fsdpp"]),
    (["+nonsense=1"], ["unknown config key", "nonsense"]),
    (["resources.trainer.tp=abc"], ["resources.trainer.tp", "abc"]),
    (["algorithm.rho=-1"], ["algorithm.rho", "-1"]),
    (["resources.device=tpu"], ["resources.device", "tpu"]),
    (["resources.generator.quantization=int4"], ["resources.generator.quantization", "int4"]),
])
def test_bad_overrides_raise_an_error_naming_the_key(override, words):
    with pytest.raises(ConfigError) as e:
        load_config("cpu_tiny", override)
    for w in words:
        assert w in str(e.value)


def test_unknown_key_inside_a_recipe_file_is_named(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("algorithm:\n  rhoo: 3\n")
    with pytest.raises(ConfigError, match="algorithm.rhoo"):
        load_config(str(path))


def test_unknown_recipe_lists_the_built_in_ones():
    with pytest.raises(ConfigError, match="cpu_tiny"):
        load_config("no_such_recipe")
