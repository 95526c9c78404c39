"""Recipe → simulator inputs: the predicted step time `llamarl plan` and `bench --simulate` print.

Why an adapter: the simulator (`simulator.py`) speaks in cluster sizes and a mean workload;
a recipe speaks in devices, parallel sizes and *caps*. The mapping, one rule per field:

| SimInputs field             | from the recipe                                              |
|-----------------------------|--------------------------------------------------------------|
| model                       | the resolved `ModelArgs` (preset or checkpoint sizes)        |
| device                      | `resources.device`'s `DeviceSpec`                            |
| generator_devices / tp      | `resources.generator.num_devices` / `.tp`                    |
| generator_bytes_per_param   | quantization fp8/int8 → 1; else the generator dtype's bytes  |
| trainer_devices / fsdp / tp | `resources.trainer.num_devices`, resolved fsdp (0 = all DP)  |
| prompts_per_step, group_size| `algorithm.*`                                                |
| prompt_tokens               | `generation.max_prompt_tokens` (a cap: errs long, ~1 % of the |
|                             | step at 8B when the cap is 384 and the mean ~200)            |
| new_tokens (mean)           | `generation.max_new_tokens / max_to_mean_new_tokens` (= 3):  |
|                             | the simulator assumes the longest sample of a 2,048-sample   |
|                             | step reaches the cap, at 3x the mean (docs/SIMULATOR.md)     |
| max_offpolicy_steps         | `algorithm.max_offpolicy_steps`                              |
| batching, max_batch_size    | `generation.batching`, `generator.max_batch_size` (the engine)|
| streaming                   | async (k ≥ 1): every async generator streams                 |
| wire_bytes_per_param, fp8   | the generators' dtype bytes; quantization fp8 → block linears |
|                             | as fp8 + row scales (executors/weights.py plans the same)    |

Pipeline parallelism (pp > 1) is not modelled by the simulator: the adapter refuses it rather
than predict something else. A layout the simulator cannot hold (e.g. the sync baseline's
devices not a multiple of the trainer's shard group) comes back as `error` with no step times,
so `llamarl plan` still prints the plan.
"""
from __future__ import annotations

from llamarl_core.sim.constants import DEFAULT_CONSTANTS, SimConstants
from llamarl_core.sim.simulator import SimInputs, simulate
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.choices import DTYPE_BYTES, QUANT_BYTES
from llamarl_core.models.args import ModelArgs
from llamarl_core.config.hardware import DeviceSpec
from llamarl_core.config.layout import trainer_sharding
from llamarl_core.config.streaming import is_sync



def sim_inputs_from_config(cfg: LlamaRLConfig, model: ModelArgs, spec: DeviceSpec,
                           constants: SimConstants = DEFAULT_CONSTANTS) -> SimInputs:
    """SimInputs built from the recipe's sizes by the rules in the module docstring."""
    g, t = cfg.resources.generator, cfg.resources.trainer
    if g.pp != 1 or t.pp != 1:
        raise ValueError(f"the scale simulator does not model pipeline parallelism "
                         f"(resources.generator.pp={g.pp}, resources.trainer.pp={t.pp})")
    fsdp, _ = trainer_sharding(t, t.num_devices)
    gen = cfg.generation
    return SimInputs(
        model=model, device=spec,
        generator_devices=g.num_devices, generator_tp=g.tp,
        generator_bytes_per_param=float(QUANT_BYTES.get(g.quantization, DTYPE_BYTES[g.dtype])),
        trainer_devices=t.num_devices, trainer_fsdp=fsdp, trainer_tp=t.tp,
        prompts_per_step=cfg.algorithm.prompts_per_step, group_size=cfg.algorithm.group_size,
        prompt_tokens=gen.max_prompt_tokens,
        new_tokens=max(1, round(gen.max_new_tokens / constants.max_to_mean_new_tokens)),
        max_offpolicy_steps=cfg.algorithm.max_offpolicy_steps, batching=gen.batching,
        wire_bytes_per_param=float(DTYPE_BYTES[g.dtype]), wire_fp8=g.quantization == "fp8",
        max_batch_size=g.max_batch_size, streaming=not is_sync(cfg.algorithm))


def simulate_config(cfg: LlamaRLConfig, model: ModelArgs, spec: DeviceSpec,
                    constants: SimConstants = DEFAULT_CONSTANTS) -> dict:
    """`simulate()` of the recipe; on a layout the simulator cannot hold, step times are None
    and `error` says why (so a plan still prints)."""
    try:
        inp = sim_inputs_from_config(cfg, model, spec, constants)
        result = simulate(inp, constants)
    except ValueError as e:
        return {"sync": {"step_s": None}, "async": {"step_s": None}, "speedup": None,
                "ideal_speedup": None, "error": str(e)}
    result["recipe"] = cfg.recipe
    return result
