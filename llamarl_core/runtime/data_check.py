"""Before launch, in the controller: the reward checked, both data splits read and rendered once.

`llamarl train` and `llamarl node` (node 0) call `check_data` before the store or any torchrun
group starts, so a data or reward mistake exits 2 in a second, naming the key, the file and
the line, instead of a role failing after launch and being restarted for nothing:
- `data.reward` and each `data.rewards[i].fn`: a custom `module:function` / `file.py:function`
  must import and be callable,
  checked in a short-lived killable subprocess (the user's code never runs in this process);
  data with no built-in verifier (`data.name=generic`) needs `data.reward`;
- train and held-out splits, through the same `load_split` the roles call: the file exists,
  every line is UTF-8 and JSON with the fields the config maps (true line and column), and
  some example is left; `data.on_error=skip` skips such lines instead, and how many is
  printed here (and written to summary.json by the trainer);
- a checkpoint's chat template rendered on every prompt in a killable child under a time
  limit first (`template_check.py`): a template that loops or raises is one line naming its file;
- every prompt rendered with the run's template and tokenizer (`encode_prompts`, as the
  roles do), against `generation.max_prompt_tokens`: how many exceed it and the longest;
- `warmstart.data`: every chat read and rendered as the trainer does (`warmstart_sequences`):
  a row without `messages`, an unknown role or no assistant turn names its line; chats longer
  than RL's sequences (`generation.max_prompt_tokens + generation.max_new_tokens`) are refused.
"""
from __future__ import annotations

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.data import DataFormatError, NoVerifier, prompt_format, resolve_template
from llamarl_core.data.splits import holds_both_splits, split_rule
from llamarl_core.data.template_check import check_template
from llamarl_core.executors.setup import encode_prompts, load_split, reward_name, split_path
from llamarl_core.models.build import tokenizer_of
from llamarl_core.rewards.custom import check_importable, is_custom
from llamarl_core.sft.warmstart import chat_warmstart, max_sequence_tokens

SPLITS = (("train", "train"), ("test", "held-out"))


def check_data(cfg: LlamaRLConfig) -> list[str]:
    """Raise ConfigError on the first problem; else the lines to print (counts, skips)."""
    checked_reward(cfg)
    checked_env(cfg)
    tokenizer = run_tokenizer(cfg)
    lines, counts, longest, reported = [], [], 0, set()
    splits = [(split, label, _load(cfg, split)) for split, label in SPLITS]
    check_chat_template(cfg, tokenizer, [ex for _, _, examples in splits for ex in examples])
    for split, label, examples in splits:
        key = _key(cfg, split)
        try:
            prompts = encode_prompts(cfg.data, cfg.generation, examples, tokenizer)
        except ValueError as e:
            raise ConfigError(f"{e} ({label} split, {key}={split_path(cfg.data, split)})") from None
        longest = max([longest, *map(len, prompts.prompt_ids)])
        counts.append(f"{len(examples)} {label}")
        report = getattr(examples, "report", None)
        if report is not None and report.num_skipped and report.path not in reported:
            reported.add(report.path)
            lines.append(_skipped("data", report, report.path))
    lines.append(f"data: {' / '.join(counts)} examples checked; prompts up to {longest} tokens "
                 f"(generation.max_prompt_tokens={cfg.generation.max_prompt_tokens})")
    if holds_both_splits(cfg.data):
        lines.append(f"data: {cfg.data.path}: its last {len(splits[1][2])} rows are held out, the "
                     f"{len(splits[0][2])} before them train ({split_rule(cfg.data)})")
    if cfg.warmstart.data:
        lines += _check_warmstart_data(cfg, tokenizer)
    return lines


def _check_warmstart_data(cfg: LlamaRLConfig, tokenizer) -> list[str]:
    path = cfg.warmstart.data
    try:
        seqs, report = chat_warmstart(path, cfg.data, cfg.generation, tokenizer)
    except (ValueError, FileNotFoundError) as e:  # DataFormatError is a ValueError
        raise _refused(cfg, "warmstart.data", path, e, ": no conversations") from None
    lines = [_skipped("warmstart.data", report, path)] if report.num_skipped else []
    trained = sum(map(sum, (m for _, m in seqs)))
    split = (f" as {len(seqs)} sequences (one per assistant turn where the template renders earlier turns "
             f"differently later)" if len(seqs) != report.num_loaded else "")
    lines.append(f"warmstart.data: {report.num_loaded} chats checked{split}, up to {max(len(t) for t, _ in seqs)} "
                 f"tokens (limit {max_sequence_tokens(cfg.generation)}), {trained} assistant tokens trained")
    return lines


def _key(cfg: LlamaRLConfig, split: str) -> str:
    return "data.path" if split == "train" or not cfg.data.eval_path else "data.eval_path"


def _load(cfg: LlamaRLConfig, split: str):
    try:
        return load_split(cfg.data, split)
    except (ValueError, FileNotFoundError) as e:  # DataFormatError is a ValueError
        if cfg.data.name == "reasoning_gym":  # no file: the message names data.task itself
            raise ConfigError(str(e)) from None
        raise _refused(cfg, _key(cfg, split), split_path(cfg.data, split), e, ": no examples") from None


def _refused(cfg: LlamaRLConfig, key: str, path, e: Exception, empty: str) -> ConfigError:
    """One line for a data file that failed to load: a malformed or missing file names the key
    (and says data.on_error=skip would skip such lines, unless the file had nothing at all:
    `empty`); any other ValueError names key=path."""
    if isinstance(e, (DataFormatError, FileNotFoundError)):
        hint = " (data.on_error=skip would skip such lines)" if (
            cfg.data.on_error == "raise" and empty not in str(e)) else ""
        return ConfigError(f"{key}: {e}{hint}")
    return ConfigError(f"{key}={path}: {e}")


def _skipped(name: str, report, path) -> str:
    first = "; ".join(f"line {n}: {why}" for n, why in report.skipped[:3])
    return f"{name}: skipped {report.num_skipped} bad line(s) of {path} (data.on_error=skip; {first})"


def run_tokenizer(cfg: LlamaRLConfig):
    """The tokenizer the roles load (`models/build.py: tokenizer_of`), a bad checkpoint as one line."""
    try:
        return tokenizer_of(cfg.model)
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(f"model.checkpoint={cfg.model.checkpoint}: {e}") from None


def check_chat_template(cfg: LlamaRLConfig, tokenizer, examples) -> None:
    """A checkpoint's chat template is code: rendered first in a child under a time limit."""
    if cfg.model.checkpoint and resolve_template(cfg.data.template, tokenizer) == "chat" and getattr(
            tokenizer, "chat_template", None):
        reason = check_template(cfg.model.checkpoint, prompt_format(cfg.data), examples)
        if reason:
            raise ConfigError(reason)


def checked_reward(cfg: LlamaRLConfig) -> str:
    """The verifier's name (the held-out accuracy's, and the training reward's unless
    `data.rewards` is set); it and each `data.rewards[i].fn` must resolve and a custom one
    import (checked in a subprocess, never here)."""
    keyed = [("data.reward", cfg.data.reward)] + [(f"data.rewards[{i}].fn", t.fn) for i, t in enumerate(cfg.data.rewards)]
    resolved = []
    for key, value in keyed:
        try:
            reward = value if value != "auto" else reward_name(cfg.data)
        except NoVerifier as e:
            raise ConfigError(f"{key}=auto: {e}" if key != "data.reward" else str(e)) from None
        reason = check_importable(reward) if is_custom(reward) and reward not in resolved else None
        if reason:
            raise ConfigError(f"{key}={reward}: {reason}")
        resolved.append(reward)
    return resolved[0]


def checked_env(cfg: LlamaRLConfig) -> None:
    """`env.entry` and each of `env.tools` must import and name a callable (a class is one),
    checked in a subprocess like a custom reward (never imported here)."""
    env = cfg.env
    targets = [("env.entry", env.entry)] if env.entry else []
    if env.tools:
        where, _, names = env.tools.rpartition(":")
        if not where or not names.strip():
            raise ConfigError(f"env.tools={env.tools}: expected path/to/file.py:fn1,fn2 or package.module:fn1,fn2")
        targets += [("env.tools", f"{where}:{name.strip()}") for name in names.split(",") if name.strip()]
    for key, target in targets:
        reason = check_importable(target)
        if reason:
            raise ConfigError(f"{key}={getattr(env, key.split('.')[1])}: {target}: {reason}")
