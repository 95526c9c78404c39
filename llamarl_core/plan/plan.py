"""Config → LaunchPlan: roles, global ranks, nodes, parallel sizes, memory, commands.

A pure function of the config (plus the host's core count and memory on CPU): `llamarl plan`
prints it, `llamarl train` saves it as plan.json and execs exactly its commands. Every
impossible layout raises ConfigError naming the key and the numbers.

Rank layout of the one global process group: generators (or the colocated actor) first, then
the trainer, then reward ranks. Reward ranks are CPU processes and use no accelerator.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.layout import row_tokens
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.config.streaming import is_sync, stream_groups_active
from llamarl_core.plan import lora as lora_plan
from llamarl_core.models.args import ModelArgs
from llamarl_core.plan import memory as mem
from llamarl_core.plan.commands import role_commands
from llamarl_core.config.hardware import DeviceSpec, cpu_spec, get_device
from llamarl_core.plan.model_source import check_tokenizer, resolve_model_args
from llamarl_core.plan.nodes import address_warnings
from llamarl_core.plan.placement import accelerators, place_roles
from llamarl_core.sim.adapter import simulate_config
from llamarl_core.plan.validate import (trainer_sharding, validate_batch, validate_data, validate_lengths,
                                        validate_logging, validate_parallelism)

MAX_RANKS_PER_CORE = 2  # CPU compute processes time-sharing one core; beyond, a run only crawls


@dataclass
class RolePlan:
    name: str
    num_devices: int                    # ranks of this role (accelerators, or CPU processes)
    first_rank: int
    nodes: list[int]
    parallelism: dict                   # {"tp", "dp", "fsdp", "pp"}
    dtype: str
    quantization: str
    memory: mem.MemoryEstimate
    capacity_gib: float
    threads: int                        # torch intra-op threads per rank (CPU)
    uses_accelerator: bool = True
    devices: list[int] = field(default_factory=list)  # local GPU indices on each of its nodes
    commands: list[str] = field(default_factory=list)
    batching: Optional[str] = None      # generation.batching, for roles that generate
    stream_groups: Optional[bool] = None  # trainer role: micro-batches start as groups arrive
    env_workers: Optional[int] = None   # roles that generate episodes: environment processes per rank (env.workers)

    @property
    def ranks(self) -> list[int]:
        return [self.first_rank, self.first_rank + self.num_devices - 1]

    def to_json(self) -> dict:
        memory, capacity = self.memory.to_dict(), round(self.capacity_gib, 3)
        return {
            "name": self.name, "num_devices": self.num_devices, "ranks": self.ranks,
            "nodes": self.nodes, "parallelism": self.parallelism, "dtype": self.dtype,
            "quantization": self.quantization, "memory_gib_per_device": memory,
            "capacity_gib_per_device": capacity, "fits": memory["total"] <= mem.USABLE_FRACTION * capacity,
            "threads": self.threads, "uses_accelerator": self.uses_accelerator, "devices": self.devices,
            "commands": self.commands,
            **({"batching": self.batching} if self.batching else {}),
            **({"stream_groups": self.stream_groups} if self.stream_groups is not None else {}),
            **({"env_workers": self.env_workers} if self.env_workers is not None else {}),
        }

    @classmethod
    def from_json(cls, d: dict) -> "RolePlan":
        """`to_json`'s inverse (`ranks` and `fits` are derived; memory and capacity as rounded there)."""
        memory = mem.MemoryEstimate(**{k: v for k, v in d["memory_gib_per_device"].items() if k != "total"})
        return cls(d["name"], d["num_devices"], d["ranks"][0], d["nodes"], d["parallelism"], d["dtype"],
                   d["quantization"], memory, d["capacity_gib_per_device"], d["threads"], d["uses_accelerator"],
                   d["devices"], d["commands"], d.get("batching"), d.get("stream_groups"), d.get("env_workers"))


@dataclass
class ControllerAddress:
    host: str
    port: int


@dataclass
class LaunchPlan:
    """What `llamarl plan` prints and `train` launches; as plan.json (`to_json`, read back by
    `from_json`) it also carries the run: its directory, id, controller address and config."""

    recipe: str
    mode: str                           # "async" | "sync"
    device: str
    total_devices: int                  # accelerators (or CPU compute processes)
    world_size: int                     # ranks of all roles (global rank = role offset + RANK)
    nodes: int
    model_preset: str
    num_params: int
    roles: list[RolePlan]
    warnings: list[str] = field(default_factory=list)
    predicted: dict | None = None       # scale-simulator step times, GPU plans only
    set_by_recipe: dict | None = None   # what the recipe set that the command line did not (recipe_values.py)
    run_dir: str | None = None          # the run's, once plan.json is written (runtime/run_dir.py) ...
    run_id: str | None = None
    controller: ControllerAddress | None = None  # the TCPStore every rank and node reaches
    config: dict | None = None          # ... and the resolved config as written (config.yaml's)
    weight_sync: dict | None = None     # async: what one generator rank receives per version (plan/lora.py)

    def role(self, name: str) -> RolePlan | None:
        return next((r for r in self.roles if r.name == name), None)

    def to_json(self) -> dict:
        run = {} if self.run_id is None else {
            "run_dir": self.run_dir, "run_id": self.run_id,
            "controller": {"host": self.controller.host, "port": self.controller.port}, "config": self.config}
        return {
            "recipe": self.recipe, "mode": self.mode, "device": self.device,
            "total_devices": self.total_devices, "world_size": self.world_size,
            "nodes": self.nodes, "model": {"preset": self.model_preset, "num_params": self.num_params},
            "roles": [r.to_json() for r in self.roles], "warnings": self.warnings,
            "predicted_step_s": self.predicted,
            **({"weight_sync": self.weight_sync} if self.weight_sync is not None else {}),
            **({"set_by_recipe": self.set_by_recipe} if self.set_by_recipe is not None else {}),
            **run,
        }

    @classmethod
    def from_json(cls, d: dict) -> "LaunchPlan":
        """`to_json`'s inverse: plan.json (`runtime/plan_file.load_plan` checks it first)."""
        address = d.get("controller")
        return cls(d["recipe"], d["mode"], d["device"], d["total_devices"], d["world_size"], d["nodes"],
                   d["model"]["preset"], d["model"]["num_params"], [RolePlan.from_json(r) for r in d["roles"]],
                   d["warnings"], d["predicted_step_s"], d.get("set_by_recipe"), d.get("run_dir"), d.get("run_id"),
                   ControllerAddress(address["host"], address["port"]) if address else None, d.get("config"),
                   d.get("weight_sync"))


def _device_spec(cfg: LlamaRLConfig) -> DeviceSpec:
    r = cfg.resources
    if r.device == "cpu":
        return cpu_spec(r.cpu_cores or None, r.host_memory_gib or None)
    return get_device(r.device)


def make_plan(cfg: LlamaRLConfig, run_dir: str | None = None, require_data: bool = True) -> LaunchPlan:
    """`require_data=False` (for `llamarl plan`) turns a dataset without a path into a warning."""
    model, model_name = resolve_model_args(cfg.model)
    if require_data:
        check_tokenizer(cfg.model)
    spec = _device_spec(cfg)
    res, alg, gen = cfg.resources, cfg.algorithm, cfg.generation
    sync = is_sync(alg)
    validate_parallelism(cfg, model)
    validate_lengths(cfg, model, model_name)
    g, t = res.generator, res.trainer
    seq_tokens = row_tokens(gen, cfg.env)  # a prompt and its completion, or a whole episode
    env_workers = cfg.env.workers if cfg.env.enabled else None
    gen_par = {"tp": g.tp, "dp": g.num_devices // (g.tp * g.pp), "fsdp": 1, "pp": g.pp}
    adapters = lora_plan.adapter_params(model, cfg.model.lora)  # 0 without LoRA
    gen_mem = mem.generator_memory(model, tp=g.tp, pp=g.pp, dtype=g.dtype, quantization=g.quantization,
                                   batch=g.max_batch_size, prompt_tokens=gen.max_prompt_tokens,
                                   seq_tokens=seq_tokens, slots=1 if sync else g.weight_slots,
                                   # the sync actor's engine shares the trained module: no adapter sync
                                   adapter_params=0 if sync else adapters,
                                   target_params=0 if sync else lora_plan.target_params(model, cfg.model.lora))

    def trainer_mem(fsdp: int):
        return mem.trainer_memory(model, fsdp=fsdp, tp=t.tp, pp=t.pp, dtype=t.dtype,
                                  micro_batch=t.micro_batch_size, seq_tokens=seq_tokens,
                                  activation_checkpointing=t.activation_checkpointing,
                                  reference=alg.kl_coef > 0, adapter_params=adapters)

    compute_devices = g.num_devices + t.num_devices
    _check_cpu_processes(cfg, spec, compute_devices)
    threads = _plan_threads(cfg, spec, compute_devices)
    roles: list[RolePlan] = []
    if sync:
        # The synchronous baseline runs both phases on all compute devices, in turn.
        fsdp, dp = trainer_sharding(t, compute_devices)
        par = {"tp": t.tp, "dp": dp, "fsdp": fsdp, "pp": t.pp, "generator_tp": g.tp}
        roles.append(RolePlan("actor", compute_devices, 0, [], par, t.dtype, g.quantization,
                              mem.colocated_memory(trainer_mem(fsdp), gen_mem), 0.0, threads,
                              batching=gen.batching, env_workers=env_workers))
    else:
        roles.append(RolePlan("generator", g.num_devices, 0, [], gen_par, g.dtype, g.quantization,
                              gen_mem, 0.0, threads, batching=gen.batching, env_workers=env_workers))
        fsdp, tdp = trainer_sharding(t, t.num_devices)
        roles.append(RolePlan("trainer", t.num_devices, g.num_devices, [],
                              {"tp": t.tp, "dp": tdp, "fsdp": fsdp, "pp": t.pp}, t.dtype, "none",
                              trainer_mem(fsdp), 0.0, threads, stream_groups=stream_groups_active(cfg)))
    roles.append(RolePlan("reward", res.reward.num_devices, compute_devices, [0],
                          {"tp": 1, "dp": res.reward.num_devices, "fsdp": 1, "pp": 1}, "float32",
                          "none", mem.reward_memory(), 0.0, 1, uses_accelerator=False))

    nodes = place_roles(cfg, spec, roles, compute_devices)
    capacity = spec.memory_gib
    if not spec.is_gpu:  # CPU "devices" are processes sharing the host's memory
        capacity = spec.memory_gib / max(1, compute_devices)
    for r in roles:
        r.capacity_gib = capacity if r.uses_accelerator else spec.memory_gib
    _check_fit(roles, spec, cfg.resources.share_devices)
    trains, generates = (roles[0] if sync else roles[1]).parallelism, roles[0].parallelism  # actor | trainer, generator
    validate_batch(cfg, trains["dp"] * trains["fsdp"], generates["dp"])
    data_warnings = (validate_data(cfg, require_path=require_data) + validate_logging(cfg, require=require_data)
                     + address_warnings(cfg))

    plan = LaunchPlan(cfg.recipe, "sync" if sync else "async", res.device,
                      accelerators(cfg, compute_devices) if spec.is_gpu else compute_devices,
                      compute_devices + res.reward.num_devices, nodes, model_name,
                      model.num_params(), roles, warnings=data_warnings)
    if not sync:
        full = mem.generator_weight_bytes(model, tp=g.tp, dtype=g.dtype, quantization=g.quantization)
        plan.weight_sync = lora_plan.sync_bytes(model, cfg.model.lora, g.dtype, full)
    if spec.name == "cpu" and compute_devices > spec.devices_per_node:
        plan.warnings.append(f"{compute_devices} compute processes on {spec.devices_per_node} CPU cores: "
                             f"they will time-share cores")
    plan_path = os.path.join(run_dir or default_run_dir(cfg), "plan.json")
    for i, r in enumerate(roles):
        r.commands = role_commands(cfg, r.name, r.num_devices, r.nodes, plan_path, i, r.devices)
    if not spec.measured:
        plan.warnings.append(f"resources.device={res.device}: no CUDA device on this host, planned against "
                             f"{spec.memory_gib:.1f} GiB per GPU; `llamarl train` reads the real device")
    if spec.is_gpu and not res.share_devices:
        plan.predicted = _predict(cfg, model, spec)
    return plan


def default_run_dir(cfg: LlamaRLConfig) -> str:
    """`run.dir`, else runs/<recipe> (`train` suffixes it if it exists: runtime/run_dir.py)."""
    return cfg.run.dir or os.path.join("runs", cfg.recipe)


def _check_cpu_processes(cfg: LlamaRLConfig, spec: DeviceSpec, compute_devices: int) -> None:
    """CPU ranks time-share the cores (up to MAX_RANKS_PER_CORE each, warned about); more is refused."""
    cores = spec.devices_per_node
    if spec.is_gpu or compute_devices <= MAX_RANKS_PER_CORE * cores:
        return
    g, t = cfg.resources.generator, cfg.resources.trainer
    raise ConfigError(f"{compute_devices} CPU compute processes (resources.generator.num_devices={g.num_devices} + "
                      f"resources.trainer.num_devices={t.num_devices}) on {cores} cores: at most "
                      f"{MAX_RANKS_PER_CORE * cores} ({MAX_RANKS_PER_CORE} per core) can run; lower num_devices "
                      f"(or set resources.cpu_cores to this host's real core count)")


def _plan_threads(cfg: LlamaRLConfig, spec: DeviceSpec, compute_devices: int) -> int:
    """Torch threads per compute rank: ranks that run at once share the cores, never more."""
    if spec.is_gpu:
        return 4
    g, t = cfg.resources.generator, cfg.resources.trainer
    cores = spec.devices_per_node
    explicit = {x.threads for x in (g, t) if x.threads}
    if explicit:
        threads = max(explicit)
        if not is_sync(cfg.algorithm) and threads * compute_devices > cores:
            raise ConfigError(f"CPU threads: {g.num_devices} generator + {t.num_devices} trainer ranks x "
                              f"{threads} threads = {threads * compute_devices} > {cores} cores "
                              f"(resources.generator.threads / resources.trainer.threads)")
        return threads
    return max(1, cores // compute_devices)


def _check_fit(roles: list[RolePlan], spec: DeviceSpec, shared: bool) -> None:
    if shared:  # generator and trainer on one GPU: their sum must fit it
        gen, tr = roles[0], roles[1]
        both = mem.MemoryEstimate(*(getattr(gen.memory, f) + getattr(tr.memory, f) for f in (
            "weights", "gradients", "optimizer", "activations", "kv_cache", "reference")))
        if not mem.fits(both, gen.capacity_gib):
            raise ConfigError(f"resources.share_devices: generator ({gen.memory.total:.1f} GiB) + trainer "
                              f"({tr.memory.total:.1f} GiB) = {both.total:.1f} GiB on one {spec.name} of "
                              f"{gen.capacity_gib:.1f} GiB ({mem.USABLE_FRACTION:.0%} usable): lower "
                              f"resources.generator.max_batch_size or resources.trainer.micro_batch_size")
    for r in roles:
        if r.uses_accelerator and not mem.fits(r.memory, r.capacity_gib):
            m = r.memory
            key = "resources.trainer" if r.name in ("trainer", "actor") else "resources.generator"
            raise ConfigError(
                f"role {r.name} needs {m.total:.1f} GiB per device (weights {m.weights:.1f}, gradients "
                f"{m.gradients:.1f}, optimizer {m.optimizer:.1f}, activations {m.activations:.1f}, "
                f"kv_cache {m.kv_cache:.1f}{_reference_part(m)}) but {spec.name} has {r.capacity_gib:.1f} GiB "
                f"({mem.USABLE_FRACTION:.0%} usable = {mem.USABLE_FRACTION * r.capacity_gib:.1f}) "
                f"with {r.num_devices} devices {r.parallelism}: raise {key}.num_devices, its "
                f"sharding (fsdp/tp), or lower batch sizes")


def _reference_part(m: mem.MemoryEstimate) -> str:
    if not m.reference:
        return ""
    return (f", KL reference {m.reference:.1f}: algorithm.kl_coef > 0 holds a frozen copy sharded "
            f"like the trainer; set algorithm.kl_coef=0 or shard it further")


def _predict(cfg: LlamaRLConfig, model: ModelArgs, spec: DeviceSpec) -> dict | None:
    result = simulate_config(cfg, model, spec)
    if result.get("error") or result["sync"].get("step_s") is None:
        return None  # a layout the simulator does not model (e.g. pipeline parallelism)
    return {"sync": result["sync"]["step_s"], "async": result["async"]["step_s"]}
