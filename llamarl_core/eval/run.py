"""`run_eval`: a resolved config → examples, verifier, engine(s) → result files.

What `llamarl eval` does, without the CLI, so tests and scripts call it directly:
- data: `eval.data` (else `data.name`) at `eval.split`. On the run's own file that training
  split itself (no `data.eval_path`) the rows are `data/splits.py: load_split`'s, training's
  rule: `split=test` is exactly the held-out tail, never a training row. Otherwise the file is
  `data.path` for the train split, else `data.eval_path` or `data.path` (a folder means
  `<split>.jsonl`);
  the built-in task is drawn with `data.seed` and the `data` difficulty knobs, as training does;
- verifier: `data.reward`, or from the data set (arith, gsm8k, math500 → math; a file →
  by its examples' family), always through one `RewardPool` in this process;
- episodes: with an environment (`env.entry`/`env.tools`) every sample is a multi-turn episode
  (eval/episodes.py), scored by its environment's rewards, else by the verifier on its last turn;
- policy: `model` generates with the checkpoint (`eval.checkpoint`, else `model.checkpoint`)
  on `resources.generator` replicas; `reference` scores the data set's own solutions;
- files: `predictions.jsonl` and `summary.json` in `eval.out`, else `run.dir`, else
  `runs/eval-<data>-<timestamp>`.
Bad input raises `ConfigError` naming the field, before any model is loaded.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.data import NoVerifier, default_reward, prompt_format, resolve_dataset
from llamarl_core.data.datasets import DATA_SUFFIXES
from llamarl_core.data.splits import (data_keys, eval_count, holds_both_splits, load_split, split_path,
                                      split_rule)
from llamarl_core.eval.evaluate import EvalResult, merge_results, reference_predictions, score_predictions
from llamarl_core.eval.metrics import summarize
from llamarl_core.rewards import RewardPool
from llamarl_core.rewards.custom import check_importable, is_custom



def eval_data_name(cfg: LlamaRLConfig) -> str:
    return cfg.eval.data or cfg.data.name


def uses_training_split(cfg: LlamaRLConfig) -> bool:
    """Eval reads the run's own data file, which training split itself (no `data.eval_path`):
    then the rows are `load_split`'s, the rule training used, never the whole file."""
    return eval_data_name(cfg) == cfg.data.name and (
        holds_both_splits(cfg.data) or cfg.data.name == "reasoning_gym")  # its rows: data.task's


def load_eval_examples(cfg: LlamaRLConfig) -> list:
    """The examples `eval` scores; data errors become one-line ConfigErrors."""
    if uses_training_split(cfg):
        try:
            examples = load_split(cfg.data, cfg.eval.split)
        except FileNotFoundError as e:
            raise ConfigError(f"data.path: {e}") from None
        except ValueError as e:
            raise ConfigError(f"data.path={cfg.data.path}: {e}") from None
        return examples[:cfg.eval.num_examples or None]
    name, split = eval_data_name(cfg), cfg.eval.split
    path = split_path(cfg.data, split)
    if name.endswith(DATA_SUFFIXES):
        path = None  # `data=path/to.jsonl` names the file itself
    count = cfg.eval.num_examples or None
    kwargs = {"keys": data_keys(cfg.data)}
    if name == "arith":
        count = count or (eval_count(cfg.data) if split != "train" else None)
        kwargs = {**kwargs, **cfg.data.arith_knobs()}
    try:
        examples = resolve_dataset(name, path, split, num_examples=count, seed=cfg.data.seed,
                                   on_error=cfg.data.on_error, **kwargs)
    except FileNotFoundError as e:
        raise ConfigError(f"data.path: {e}") from None
    except ValueError as e:
        raise ConfigError(f"eval.data={name!r}: {e}") from None
    if not examples:
        raise ConfigError(f"eval.data={name!r} split {split!r}: no examples")
    return examples


def rows_line(cfg: LlamaRLConfig, examples) -> str:
    """What `eval` scores, in words: how many rows, of which file, and why those."""
    d, split, n = cfg.data, cfg.eval.split, len(examples)
    if uses_training_split(cfg):
        which = (("the last data.num_eval_examples={} rows".format(d.num_eval_examples) if d.num_eval_examples
                  is not None else f"the last {n} rows ({split_rule(d)})") + ", the rows training held out"
                 if split != "train" else "the rows before the held-out tail, the rows training used")
        return f"eval: {n} {'held-out' if split != 'train' else 'train'} rows of {d.path} (split={split}: {which})"
    name = eval_data_name(cfg)
    if name == "arith":
        return f"eval: {n} rows of the built-in arith task (split={split}, data.seed={d.seed})"
    source = name if name.endswith(DATA_SUFFIXES) else split_path(d, split)
    return f"eval: {n} rows of {source} (split={split})"


def eval_reward_name(cfg: LlamaRLConfig, examples) -> str:
    """`data.reward` (a custom one checked to import, in a subprocess), else the data's own."""
    if is_custom(cfg.data.reward):
        reason = check_importable(cfg.data.reward)
        if reason:
            raise ConfigError(f"data.reward={cfg.data.reward}: {reason}")
    if cfg.data.reward != "auto":
        return cfg.data.reward
    try:
        return default_reward(eval_data_name(cfg), examples[0].source)
    except NoVerifier as e:
        raise ConfigError(str(e)) from None


def eval_run_dir(cfg: LlamaRLConfig) -> Path:
    if cfg.eval.out or cfg.run.dir:
        return Path(cfg.eval.out or cfg.run.dir)
    label = Path(eval_data_name(cfg)).stem
    return Path("runs") / f"eval-{label}-{time.strftime('%Y%m%d-%H%M%S')}"


def run_eval(cfg: LlamaRLConfig, *, progress: bool = False, out_file: str | None = None,
             extra: dict | None = None, say=None) -> tuple[EvalResult, Path]:
    """Evaluate as configured; write predictions.jsonl + summary.json (+ `out_file`).
    `say`: called with the line naming the rows scored (the CLI prints it)."""
    e = cfg.eval
    examples = load_eval_examples(cfg)
    rows = rows_line(cfg, examples)
    if say:
        say(rows)
    reward = eval_reward_name(cfg, examples)
    max_new_tokens = e.max_new_tokens or cfg.generation.max_new_tokens
    start = time.perf_counter()
    info = {"data": eval_data_name(cfg), "split": e.split, "policy": e.policy, "reward": reward,
            "template": cfg.data.template, "temperature": e.temperature,
            "max_new_tokens": max_new_tokens, "seed": cfg.run.seed, "checkpoint": None,
            "num_ranks": 1, "rows": rows, "env": cfg.env.entry or cfg.env.tools}
    with RewardPool(reward, num_workers=cfg.resources.reward.workers,
                    timeout_s=cfg.resources.reward.timeout_s, max_abs=cfg.reward.max_abs) as pool:
        if e.policy == "reference":
            predictions = reference_predictions(examples)
        else:
            from llamarl_core.eval.parallel import generate_on_replicas, model_spec
            spec = model_spec(cfg, examples, max_new_tokens, prompt_format(cfg.data, eval_data_name(cfg)))
            info.update(checkpoint=spec["checkpoint"], num_ranks=spec["world_size"],
                        device=spec["device"], template=spec["template"])
            predictions = generate_on_replicas(spec, examples, progress=progress)
        score_predictions(predictions, None, reward_pool=pool, examples=examples)
        info["reward_stats"] = dict(pool.stats)
    result = merge_results([predictions])
    elapsed_s = time.perf_counter() - start
    tokens = sum(sum(p["num_tokens"]) for p in predictions)
    info.update(elapsed_s=round(elapsed_s, 3), completion_tokens=tokens,
                tokens_per_s=round(tokens / elapsed_s, 1) if elapsed_s > 0 else 0.0)
    result.summary.update(info, **(extra or {}))
    run_dir = eval_run_dir(cfg)
    write_result(result, run_dir, out_file)
    return result, run_dir


def write_result(result: EvalResult, run_dir: Path, out_file: str | None = None) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "predictions.jsonl", "w", encoding="utf-8") as f:
        for p in result.predictions:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    text = json.dumps(result.summary, indent=2) + "\n"  # int keys of pass@k become "1", "2", ...
    (run_dir / "summary.json").write_text(text)
    if out_file:
        os.makedirs(os.path.dirname(os.path.abspath(out_file)), exist_ok=True)
        Path(out_file).write_text(text)


__all__ = ["run_eval", "load_eval_examples", "rows_line", "uses_training_split", "eval_reward_name", "eval_run_dir", "write_result",
           "summarize"]
