"""GPU placement and the host check: what each GPU role gets, and a host that lacks it."""
import subprocess
import sys

import pytest
import torch

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.plan.plan import make_plan
from llamarl_core.runtime.devices import backend, check_host, gpus_needed_here


def plan_for(recipe, *overrides):
    return make_plan(load_config(recipe, list(overrides)), require_data=False)


def test_one_node_recipe_packs_generators_and_trainer_on_the_8_gpus():
    plan = plan_for("8b_gsm8k_1node")
    gen, tr = plan.role("generator"), plan.role("trainer")
    assert (gen.nodes, gen.devices) == ([0], [0, 1, 2, 3])
    assert (tr.nodes, tr.devices) == ([0], [4, 5, 6, 7])
    assert tr.parallelism == {"tp": 1, "dp": 1, "fsdp": 4, "pp": 1}
    assert tr.commands[0].startswith("env CUDA_VISIBLE_DEVICES=4,5,6,7 ")
    assert plan.total_devices == 8 and all(r.to_json()["fits"] for r in plan.roles)
    assert gpus_needed_here(plan) == 8


def test_gpu_1x_puts_both_processes_on_one_shared_gpu_over_gloo():
    plan = plan_for("gpu_1x")
    assert plan.total_devices == 1 and plan.world_size == 3
    assert plan.role("generator").devices == plan.role("trainer").devices == [0]
    cfg = load_config("gpu_1x")
    assert backend(cfg) == "gloo" and backend(load_config("8b_gsm8k_1node")) == "cpu:gloo,cuda:nccl"


def test_roles_larger_than_a_node_fill_whole_nodes():
    plan = plan_for("8b_gsm8k")
    assert plan.role("generator").nodes == list(range(16)) and plan.role("trainer").nodes == list(range(16, 32))
    assert plan.role("trainer").devices == list(range(8))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a host without CUDA")
def test_a_host_without_cuda_is_refused_in_one_line_naming_need_and_have():
    with pytest.raises(ConfigError) as e:
        check_host(plan_for("8b_gsm8k_1node"), "8b_gsm8k_1node")
    text = str(e.value)
    assert "\n" not in text and "needs 8 CUDA GPU(s)" in text and "this host has none" in text
    check_host(plan_for("cpu_tiny"), "cpu_tiny")  # CPU recipes need nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a host without CUDA")
def test_train_on_a_gpu_recipe_exits_2_before_starting_anything(tmp_path):
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "train", "recipe=gpu_1x",
                          f"run.dir={tmp_path}/run"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "recipe gpu_1x needs 1 CUDA GPU(s)" in out.stderr and "this host has none" in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("recipe,overrides,key", [
    ("cpu_tiny", ["controller.weight_transport=cuda_ipc"], "weight_transport=cuda_ipc"),
    ("gpu_1x", ["controller.weight_transport=collective"], "weight_transport=collective"),
    ("8b_gsm8k_1node", ["controller.weight_transport=shm"], "weight_transport=shm"),
])
def test_a_weight_transport_that_cannot_work_on_the_layout_is_refused(recipe, overrides, key):
    with pytest.raises(ConfigError, match=key):
        plan_for(recipe, *overrides)


def test_auto_weight_transport_is_cuda_ipc_on_a_shared_gpu_and_shm_on_one_cpu_host():
    from llamarl_core.executors.pipeline import weight_sync_config

    def transport(recipe):
        return weight_sync_config(load_config(recipe), plan_for(recipe)).transport

    assert transport("gpu_1x") == "cuda_ipc"
    assert transport("cpu_tiny") == "shm"
    assert transport("8b_gsm8k_1node") == "collective"
