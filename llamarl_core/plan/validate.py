"""Cross-section checks that need the model's sizes or several config sections at once."""
from __future__ import annotations

import importlib.util
import os

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.layout import trainer_sharding
from llamarl_core.config.schema import GenerationConfig, LlamaRLConfig
from llamarl_core.config.streaming import is_sync
from llamarl_core.data.reasoning_gym_tasks import check_task
from llamarl_core.models.args import ModelArgs
from llamarl_core.models.peft_io import check_matches, read_adapter
from llamarl_core.models.tp_slices import check_tp


def _check_tp(key: str, tp: int, m: ModelArgs) -> None:
    try:  # the rule lives beside the sharding it protects (models/tp_slices.py)
        check_tp(m, tp, key)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_split(key: str, num_devices: int, sizes: dict, dp: int) -> int:
    """num_devices must equal product(sizes) x dp; returns the (derived) dp."""
    prod = 1
    for v in sizes.values():
        prod *= v
    names = " x ".join(f"{k}={v}" for k, v in sizes.items())
    if num_devices % prod:
        raise ConfigError(f"{key}.num_devices={num_devices} is not divisible by {names} = {prod}")
    derived = num_devices // prod
    if dp and dp != derived:
        raise ConfigError(f"{key}.dp={dp} but num_devices={num_devices} / ({names}) = {derived}")
    return derived


def validate_parallelism(cfg: LlamaRLConfig, m: ModelArgs) -> None:
    g, t = cfg.resources.generator, cfg.resources.trainer
    _check_tp("resources.generator.tp", g.tp, m)
    _check_generator_built(cfg, m)
    _check_lora_start(cfg)
    _check_tp("resources.trainer.tp", t.tp, m)
    for key, pp in (("resources.generator.pp", g.pp), ("resources.trainer.pp", t.pp)):
        if m.n_layers % pp:
            raise ConfigError(f"{key}={pp} does not divide the model's {m.n_layers} layers")
    _check_split("resources.generator", g.num_devices, {"tp": g.tp, "pp": g.pp}, g.dp)
    fsdp, _ = trainer_sharding(t, t.num_devices)
    _check_split("resources.trainer", t.num_devices, {"fsdp": fsdp, "tp": t.tp, "pp": t.pp}, t.dp)
    if t.strategy == "ddp" and fsdp > 1:
        raise ConfigError(f"resources.trainer.fsdp={fsdp} needs resources.trainer.strategy=fsdp2 "
                          f"(ddp replicates the whole model)")
    if is_sync(cfg.algorithm):
        total = g.num_devices + t.num_devices
        _check_split("sync actor (generator + trainer devices)", total,
                     {"fsdp": trainer_sharding(t, total)[0], "tp": t.tp, "pp": t.pp}, 0)
        if total % (g.tp * g.pp):
            raise ConfigError(f"sync mode: {total} actor devices not divisible by "
                              f"resources.generator.tp x pp = {g.tp * g.pp}")
    # The plan is the truth: layouts the runtime does not build are refused, not planned
    # (generator layouts: _check_generator_built).
    for key, v in (("resources.trainer.tp", t.tp), ("resources.trainer.pp", t.pp)):
        if v != 1:
            raise ConfigError(f"{key}={v}: not built by the runtime (only 1 is); "
                              f"shard with resources.trainer.fsdp (FSDP2)")
    _check_shared(cfg)
    _check_weight_transport(cfg)
    if g.quantization == "fp8" and cfg.resources.device == "cpu":
        raise ConfigError("resources.generator.quantization=fp8 needs a GPU; on cpu use int8 or none")


def _check_shared(cfg: LlamaRLConfig) -> None:
    r = cfg.resources
    if not r.share_devices:
        return
    if r.device == "cpu":
        raise ConfigError("resources.share_devices=true shares a GPU; on resources.device=cpu "
                          "processes already share the host")
    if is_sync(cfg.algorithm):
        raise ConfigError("resources.share_devices=true is for async runs; the sync actor "
                          "(algorithm.max_offpolicy_steps=0) already colocates both phases")
    if (r.generator.num_devices, r.trainer.num_devices) != (1, 1):
        raise ConfigError(f"resources.share_devices=true needs resources.generator.num_devices=1 and "
                          f"resources.trainer.num_devices=1 (got {r.generator.num_devices} and "
                          f"{r.trainer.num_devices}): one GPU, one process of each")


def _check_weight_transport(cfg: LlamaRLConfig) -> None:
    """Each DDMA transport where it works (executors/weights.py picks one for `auto`)."""
    t, r = cfg.controller.weight_transport, cfg.resources
    if t == "auto":
        return
    if t == "cuda_ipc" and not r.share_devices:
        raise ConfigError("controller.weight_transport=cuda_ipc is for a generator and a trainer sharing one "
                          "GPU (resources.share_devices=true); use auto")
    if r.share_devices and t != "cuda_ipc":
        raise ConfigError(f"controller.weight_transport={t}: with resources.share_devices=true the weights "
                          f"move by CUDA IPC (NCCL refuses two ranks on one GPU); use auto or cuda_ipc")
    if t == "shm" and r.device != "cpu":
        raise ConfigError(f"controller.weight_transport=shm puts the generators' weights in host memory; "
                          f"on resources.device={r.device} use auto (NCCL) or collective")


def _check_lora_start(cfg: LlamaRLConfig) -> None:
    """model.lora.init_from: a PEFT adapter directory whose r, lora_alpha and targets are
    model.lora's (the tensors' shapes are checked against the model when the trainer loads it)."""
    lora = cfg.model.lora
    if not lora.init_from:
        return
    try:
        spec, _ = read_adapter(lora.init_from)
        check_matches(spec, lora, lora.init_from)
    except (OSError, ValueError) as e:
        raise ConfigError(f"model.lora.init_from: {e}") from None


def _check_generator_built(cfg: LlamaRLConfig, m: ModelArgs) -> None:
    """Generator layouts the runtime builds: TP replicas (CPU gloo twin included), no PP."""
    g = cfg.resources.generator
    if g.pp != 1:
        raise ConfigError(f"resources.generator.pp={g.pp}: not built by the runtime (only 1 is); "
                          f"split a replica with resources.generator.tp")
    if g.tp > 1 and is_sync(cfg.algorithm):
        raise ConfigError(f"resources.generator.tp={g.tp}: the sync actor "
                          f"(algorithm.max_offpolicy_steps=0) generates unsharded; use 1")
    if cfg.generation.cuda_graphs:
        where = ("runs on GPUs only; on resources.device=cpu use false" if cfg.resources.device == "cpu"
                 else "is not built by the runtime yet (the decode step runs eagerly); use false")
        raise ConfigError(f"generation.cuda_graphs=true: decode-step CUDA graph capture {where}")
    if m.ffn_dim % g.tp:
        raise ConfigError(f"resources.generator.tp={g.tp} does not divide the model's "
                          f"ffn_dim={m.ffn_dim} (MLP columns)")
    lora = cfg.model.lora
    if lora.enabled and g.tp > 1:  # the generator builds its base unsharded (executors/adapter_sync.py)
        raise ConfigError(f"model.lora.rank={lora.rank} with resources.generator.tp={g.tp}: LoRA generators "
                          f"merge adapters into an unsharded base; use tp=1")
    if lora.enabled and g.quantization == "fp8":
        raise ConfigError(f"model.lora.rank={lora.rank} with resources.generator.quantization=fp8: the fp8 "
                          f"engine takes its weights quantized over the sync; use none or int8")
    if g.tp > 1 and cfg.env.enabled:  # a replica's ranks would each wait on their own environments
        raise ConfigError(f"resources.generator.tp={g.tp} with an environment (env.entry / env.tools): "
                          f"episodes run on unsharded generators only; use tp=1")


def validate_batch(cfg: LlamaRLConfig, trainer_data_parallel: int, generator_replicas: int) -> None:
    a = cfg.algorithm
    batch = a.prompts_per_step * a.group_size
    if batch % trainer_data_parallel:
        raise ConfigError(f"algorithm.prompts_per_step={a.prompts_per_step} x group_size={a.group_size} "
                          f"= {batch} sequences is not divisible by the trainer's {trainer_data_parallel} "
                          f"data-parallel ranks (dp x fsdp)")
    if a.prompts_per_step % trainer_data_parallel:
        raise ConfigError(f"algorithm.prompts_per_step={a.prompts_per_step} is not divisible by the trainer's "
                          f"{trainer_data_parallel} data-parallel ranks (dp x fsdp): each trains whole "
                          f"prompt groups, so some rank would get none")
    if a.prompts_per_step % generator_replicas:
        raise ConfigError(f"algorithm.prompts_per_step={a.prompts_per_step} is not divisible by the "
                          f"{generator_replicas} generator replicas (each takes whole prompt groups)")
    rows = batch // trainer_data_parallel
    if a.mini_batches > rows:
        raise ConfigError(f"algorithm.mini_batches={a.mini_batches} exceeds the {rows} sequences each of the "
                          f"trainer's {trainer_data_parallel} data-parallel ranks trains per step "
                          f"(prompts_per_step x group_size / ranks)")
    if a.overlong_buffer_tokens > cfg.generation.max_new_tokens:
        raise ConfigError(f"algorithm.overlong_buffer_tokens={a.overlong_buffer_tokens} exceeds "
                          f"generation.max_new_tokens={cfg.generation.max_new_tokens}")
    g = cfg.resources.generator
    if g.max_batch_size % a.group_size:
        raise ConfigError(f"resources.generator.max_batch_size={g.max_batch_size} is not divisible by "
                          f"algorithm.group_size={a.group_size} (a batch holds whole groups)")


def validate_lengths(cfg: LlamaRLConfig, m: ModelArgs, model_name: str) -> None:
    source = ("max_position_embeddings in its config.json" if cfg.model.checkpoint
              else f"model.preset={cfg.model.preset}")
    check_lengths_fit(cfg.generation, m.max_seq_len, f"model {model_name}", source)
    need = cfg.generation.max_prompt_tokens + cfg.env.max_episode_tokens
    if cfg.env.enabled and need > m.max_seq_len:
        raise ConfigError(f"generation.max_prompt_tokens={cfg.generation.max_prompt_tokens} + env.max_episode_tokens="
                          f"{cfg.env.max_episode_tokens} = {need} tokens, but model {model_name} has "
                          f"{m.max_seq_len} positions ({source}): lower env.max_episode_tokens")


def check_lengths_fit(g: GenerationConfig, positions: int, model: str, source: str) -> None:
    """The one "the lengths fit" rule: a prompt and its completion must fit the model's
    positions, or the engine would stop every long completion early (as "length") below
    generation.max_new_tokens. The plan applies it before launch; chunk generation again for
    callers that build it without a plan (executors/chunks.py)."""
    need = g.max_prompt_tokens + g.max_new_tokens
    if need > positions:
        raise ConfigError(f"generation.max_prompt_tokens={g.max_prompt_tokens} + generation.max_new_tokens="
                          f"{g.max_new_tokens} = {need} tokens, but {model} has {positions} "
                          f"positions ({source}): lower generation.max_new_tokens to at most "
                          f"{max(0, positions - g.max_prompt_tokens)}")


def validate_data(cfg: LlamaRLConfig, require_path: bool = True) -> list[str]:
    """Missing files are errors; a dataset with no path is an error to train, a warning to plan."""
    d = cfg.data
    for key, path in (("data.path", d.path), ("data.eval_path", d.eval_path)):
        if path and not os.path.exists(path):  # a folder: <split>.jsonl files or a save_to_disk dataset
            raise ConfigError(f"{key}={path}: file not found")
    if d.name == "reasoning_gym":  # generated rows, no file: the task must exist (and the package)
        try:
            check_task(d.task)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        cut = [x for x in cfg.generation.stop_strings if "</answer>" in x]
        if cut:  # a completion ends before its stop string: the scorer would never see the tag
            raise ConfigError(f"generation.stop_strings={cut} with data.name=reasoning_gym: the completion is "
                              f"cut before the stop string, so its closing </answer> tag would be lost and "
                              f"every answer score 0; drop it (the model ends with its end-of-text token)")
    if d.name in ("gsm8k", "math500", "generic") and not d.path:
        hint = {"gsm8k": "grade_school_math/data/train.jsonl from github.com/openai/grade-school-math",
                "math500": "prm800k/math_splits/test.jsonl from github.com/openai/prm800k",
                "generic": "a .jsonl, .json, .parquet or .csv file or a datasets save_to_disk folder; "
                           "name its fields with data.prompt_key/data.answer_key"}[d.name]
        msg = (f"data.name={d.name} needs data.path=/path/to/file.jsonl ({hint}); "
               f"nothing is downloaded at run time")
        if require_path:
            raise ConfigError(msg)
        return [msg]
    return []


def validate_logging(cfg: LlamaRLConfig, require: bool = True) -> list[str]:
    """logging.wandb=true without the `wandb` package: an error to train, a warning to plan."""
    if not cfg.logging.wandb or importlib.util.find_spec("wandb") is not None:
        return []
    msg = "logging.wandb=true needs the `wandb` package: pip install 'llamarl[wandb]' (or set logging.wandb=false)"
    if require:
        raise ConfigError(msg)
    return [msg]
