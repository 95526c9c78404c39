"""`llamarl plan` with LoRA: the weight sync per version is the adapters' bytes (worked out by hand
from tiny-2m's shapes), the memory estimate trains and syncs only them, and the layouts the
runtime does not build (generator TP, fp8 generators) exit 2 naming both keys."""
import os
import subprocess
import sys

import pytest

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.plan.plan import LaunchPlan, make_plan

GIB = 2**30
# tiny-2m: dim 256, 4 heads of 64 (q = kv = 256 rows), ffn 688, 3 layers; rank 4, float32 generators.
# Per layer: wq wk wv wo [256, 256] -> 4·(256+256) = 2048 each, 8192; w1 w3 [688, 256] and w2
# [256, 688] -> 4·(688+256) = 3776 each, 11328; 19520 a layer, 58560 in all, x 4 bytes:
ADAPTER_BYTES = 58_560 * 4                  # 234,240 B
FULL_BYTES = 2_506_496 * 4                  # every tiny-2m parameter, float32: 10,025,984 B
TARGET_PARAMS = 3 * (4 * 256 * 256 + 3 * 688 * 256)  # the base copy a LoRA generator keeps: 2,371,584


def plan_for(*overrides):
    return make_plan(load_config("cpu_tiny", list(overrides)), require_data=False)


def test_a_lora_plan_syncs_the_adapter_bytes_and_shows_them():
    plan = plan_for("model.lora.rank=4")
    assert plan.num_params == 2_506_496
    assert plan.weight_sync["bytes_per_version"] == ADAPTER_BYTES
    assert plan.weight_sync["full_bytes"] == FULL_BYTES
    assert LaunchPlan.from_json(plan.to_json()).weight_sync == plan.weight_sync
    out = subprocess.run([sys.executable, "-m", "cli.main", "plan", "model.lora.rank=4"], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert f"0.223 MiB ({ADAPTER_BYTES} bytes) of LoRA adapters" in out.stdout
    assert f"full weights: 9.562 MiB ({FULL_BYTES} bytes)" in out.stdout


def test_without_lora_the_sync_is_every_weight():
    assert plan_for().weight_sync == {"what": "full weights", "bytes_per_version": FULL_BYTES,
                                      "full_bytes": FULL_BYTES}


def test_lora_memory_trains_the_adapters_and_the_generator_keeps_the_targets_base():
    full, lora = plan_for(), plan_for("model.lora.rank=4")
    a = ADAPTER_BYTES // 4  # adapter parameters
    t = lora.role("trainer").memory
    assert t.gradients * GIB == pytest.approx(a * 4)          # fp32 gradients of the adapters only
    assert t.optimizer * GIB == pytest.approx(a * 8)          # AdamW's two fp32 moments
    assert (t.weights - full.role("trainer").memory.weights) * GIB == pytest.approx(a * 4)
    g = lora.role("generator").memory
    # one built copy of the weights (not two slots), two slots of adapters, the targets' base copy
    assert g.weights * GIB == pytest.approx(FULL_BYTES + 2 * ADAPTER_BYTES + TARGET_PARAMS * 4)


@pytest.mark.parametrize("overrides, keys", [
    (["resources.generator.tp=2", "resources.generator.num_devices=2"], ["resources.generator.tp=2"]),
    (["resources.generator.quantization=fp8"], ["resources.generator.quantization=fp8"]),
])
def test_lora_generators_the_runtime_does_not_build_exit_2_naming_both_keys(overrides, keys):
    with pytest.raises(ConfigError) as e:
        plan_for("model.lora.rank=4", *overrides)
    assert all(k in str(e.value) for k in ["model.lora.rank=4", *keys]), str(e.value)
    out = subprocess.run([sys.executable, "-m", "cli.main", "plan", "model.lora.rank=4", *overrides],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and "model.lora.rank=4" in lines[0] and keys[0] in lines[0], lines
