"""Generation for `llamarl eval` on one or several generator replicas.

Replicas = `resources.generator.dp` (else num_devices / (tp * pp)); each is one process
holding the whole model on one device (tensor/pipeline parallel engines are not used by
eval: a replica needs to fit one device). With more than one replica the processes are
started by torchrun, the launcher `train` uses (`replica.py`): each generates the batches b
with b % world == rank (`generate_predictions`) and writes them to a file; the parent
merges. Scoring stays in the parent, in one `RewardPool`, like the training reward role.
torchrun ends the other replicas when one fails, and the parent reports which.

Everything a child needs travels in `spec`, a plain dict; the checkpoint and every prompt's
length are checked here first, so bad input fails before any process starts. With an
environment (`env.enabled`) each replica opens its own environment workers (EvalEpisodes) and
closes them when its batches are done.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.layout import row_tokens
from llamarl_core.config.schema import EnvConfig
from llamarl_core.data import PromptFormat, prompt_format, resolve_template
from llamarl_core.eval.episodes import EvalEpisodes
from llamarl_core.eval.evaluate import encode_prompt, generate_predictions


def model_spec(cfg, examples, max_new_tokens: int, fmt: PromptFormat | None = None) -> dict:
    """Checked, picklable settings for the generating processes; `fmt` (default: the config's
    for `data.name`) with its template resolved against the checkpoint's tokenizer."""
    from llamarl_core.data.template_check import check_template
    from llamarl_core.models.checkpoint_check import check_checkpoint
    from llamarl_core.models.hf_config import args_from_hf_config, read_config
    from llamarl_core.models.tokenizer import load_tokenizer

    checkpoint = cfg.eval.checkpoint or cfg.model.checkpoint
    if not checkpoint:
        raise ConfigError("eval.checkpoint is required with eval.policy=model (a Hugging Face-format "
                          "directory, e.g. checkpoint=runs/cpu_tiny/checkpoints/final); or use policy=reference")
    path = Path(checkpoint)
    if not (path / "config.json").is_file():
        raise ConfigError(f"eval.checkpoint={checkpoint}: no config.json there (not a checkpoint directory)")
    pickled = sorted(path.glob("*.bin")) + sorted(path.glob("*.pt")) + sorted(path.glob("*.pth"))
    if pickled:  # loading one would unpickle it: code from a file would run in this process
        raise ConfigError(f"eval.checkpoint={checkpoint}: {pickled[0]} is a pickled weight file; llamarl "
                          "never unpickles (it can run code): keep only *.safetensors in the directory")
    try:
        max_seq_len = args_from_hf_config(read_config(path), source=str(path / "config.json")).max_seq_len
        tokenizer = load_tokenizer(path)
        check_checkpoint(path)  # weights against config.json, headers only: before any process
    except (ValueError, KeyError, FileNotFoundError) as e:
        text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        raise ConfigError(f"eval.checkpoint={checkpoint}: {text}") from None
    fmt = fmt or prompt_format(cfg.data)
    fmt = replace(fmt, template=resolve_template(fmt.template, tokenizer))
    if fmt.template == "chat" and getattr(tokenizer, "chat_template", None):
        reason = check_template(path, fmt, examples)  # the template is code: a child, a time limit
        if reason:
            raise ConfigError(f"eval.checkpoint={checkpoint}: {reason}")
    for ex in examples:
        n = len(encode_prompt(ex, fmt, tokenizer))
        if n >= max_seq_len:
            raise ConfigError(f"example {ex.id}: prompt has {n} tokens but the checkpoint's "
                              f"max_seq_len is {max_seq_len}; no room to generate")
    g = cfg.resources.generator
    replicas = g.dp or max(1, g.num_devices // (g.tp * g.pp))
    n = cfg.eval.n_samples if cfg.eval.temperature > 0 else 1
    num_batches = -(-len(examples) // max(1, g.max_batch_size // n))
    world_size = max(1, min(replicas, num_batches))
    use_cuda = cfg.resources.device != "cpu" and _cuda_count() > 0
    if use_cuda and world_size > _cuda_count():
        world_size = _cuda_count()
    cores = cfg.resources.cpu_cores or os.cpu_count() or 1
    threads = g.threads or (max(1, cores // world_size) if world_size > 1 else 0)
    return {"checkpoint": str(path), "dtype": g.dtype, "quantization": g.quantization,
            "max_batch_size": g.max_batch_size, "world_size": world_size,
            "device": "cuda" if use_cuda else "cpu", "threads": threads,
            "template": fmt.template, "system_prompt": fmt.system_prompt,
            "instruction": fmt.instruction, "chat_template_kwargs": dict(fmt.chat_template_kwargs),
            "n_samples": cfg.eval.n_samples,
            "temperature": cfg.eval.temperature, "top_p": cfg.generation.top_p,
            "max_new_tokens": max_new_tokens, "stop_strings": list(cfg.generation.stop_strings),
            "seed": cfg.run.seed, "max_prompt_tokens": cfg.generation.max_prompt_tokens,
            "env": dataclasses.asdict(cfg.env) if cfg.env.enabled else None,
            # episodes stream their turns into a cache sized for any row: size it for the run's rows
            "row_tokens": row_tokens(cfg.generation, cfg.env) if cfg.env.enabled else None}


def generate_on_replicas(spec: dict, examples, progress: bool = False) -> list[dict]:
    """Unscored predictions of all examples, in data order."""
    if spec["world_size"] == 1:
        return _generate(0, spec, examples, progress)
    import subprocess

    from llamarl_core.plan.commands import loopback_torchrun_argv

    world = spec["world_size"]
    with tempfile.TemporaryDirectory(prefix="llamarl-eval-") as tmp:
        job = Path(tmp, "job.json")
        job.write_text(json.dumps({"spec": spec, "progress": progress,
                                   # rows' own fields stay here: scoring happens in this process
                                   "examples": [dict(dataclasses.asdict(e), fields=None) for e in examples]}))
        cmd = loopback_torchrun_argv() + [f"--nproc-per-node={world}",
                                  "--max-restarts=0", "-m", "llamarl_core.eval.replica",
                                  "role=eval", f"job={job}"]
        env = {**os.environ, "OMP_NUM_THREADS": str(spec["threads"] or 1)}
        code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode
        missing = [r for r in range(world) if not Path(tmp, f"rank{r}.json").exists()]
        if code != 0 or missing:
            raise RuntimeError(f"eval replica(s) {missing or '?'} failed (torchrun exit code {code}); "
                               f"their error is printed above")
        merged = []
        for rank in range(world):
            merged.extend(json.loads(Path(tmp, f"rank{rank}.json").read_text()))
    return sorted(merged, key=lambda p: p["index"])


def _generate(rank: int, spec: dict, examples, progress: bool) -> list[dict]:
    import torch

    from llamarl_core.generation import GenerationEngine
    from llamarl_core.models import load_pretrained
    from llamarl_core.models.dtypes import TORCH_DTYPES

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    device = f"cuda:{rank}" if spec["device"] == "cuda" else "cpu"
    model, tokenizer = load_pretrained(spec["checkpoint"], dtype=TORCH_DTYPES[spec["dtype"]],
                                       device=device)
    engine = GenerationEngine(model, tokenizer, max_batch_size=spec["max_batch_size"],
                              quantization=spec["quantization"],
                              max_seq_len=spec["row_tokens"] + 1 if spec.get("row_tokens") else None)
    fmt = PromptFormat(spec["template"], spec.get("system_prompt"), spec.get("instruction", ""),
                       spec.get("chat_template_kwargs") or {})
    # with an environment, this replica's own workers, closed when its share is done
    episodes = (EvalEpisodes(EnvConfig(**spec["env"]), tokenizer, fmt, spec["max_prompt_tokens"])
                if spec.get("env") else contextlib.nullcontext())
    with episodes:
        return generate_predictions(
            engine, tokenizer, examples, n_samples=spec["n_samples"], template=fmt,
            temperature=spec["temperature"], max_new_tokens=spec["max_new_tokens"],
            stop_strings=spec["stop_strings"], seed=spec["seed"], batch_size=spec["max_batch_size"],
            progress=progress, rank=rank, world_size=spec["world_size"], top_p=spec["top_p"],
            episodes=episodes if spec.get("env") else None)


def _cuda_count() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
