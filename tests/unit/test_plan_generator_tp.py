"""The plan shows generator TP only where the runtime builds it; the rest exits 2 naming the key."""
import pytest

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.plan.plan import make_plan


def plan_for(recipe, *overrides):
    return make_plan(load_config(recipe, list(overrides)), require_data=False)


def test_cpu_plan_runs_a_tp2_generator_replica_on_two_ranks():
    plan = plan_for("cpu_tiny", "resources.generator.tp=2", "resources.generator.num_devices=2")
    assert plan.role("generator").parallelism == {"tp": 2, "dp": 1, "fsdp": 1, "pp": 1}


@pytest.mark.parametrize("overrides, words", [
    (["resources.generator.pp=2", "resources.generator.num_devices=2"],
     ["resources.generator.pp=2", "not built"]),
    (["resources.generator.tp=2", "resources.generator.num_devices=2", "algorithm.max_offpolicy_steps=0"],
     ["resources.generator.tp=2", "sync actor"]),
    (["generation.cuda_graphs=true"], ["generation.cuda_graphs=true", "GPUs only"]),
])
def test_generator_layouts_the_runtime_does_not_build_are_refused_naming_the_key(overrides, words):
    with pytest.raises(ConfigError) as e:
        plan_for("cpu_tiny", *overrides)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_cuda_graphs_are_refused_on_a_gpu_plan_too_until_the_runtime_builds_them():
    with pytest.raises(ConfigError, match="generation.cuda_graphs=true.*not built"):
        plan_for("8b_gsm8k", "generation.cuda_graphs=true")
