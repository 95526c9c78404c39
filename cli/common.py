"""What every verb shares: argv → (flags, recipe, overrides) → config, and exit codes.

Exit codes: 0 success, 1 a run that failed, 2 bad input (config, plan, data, arguments).
Bad input prints one line on stderr, never a traceback.
"""
from __future__ import annotations

import argparse
import errno
import sys
from typing import Callable, Sequence

from omegaconf import OmegaConf

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import DEFAULT_RECIPE, compose_config, list_recipes, load_config, split_recipe_arg

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

RECIPE_HELP = (f"recipe=NAME picks recipes/NAME.yaml (built-in: {', '.join(list_recipes())}; default "
               f"{DEFAULT_RECIPE}) or recipe=path/to.yaml; other key=value words are Hydra overrides "
               f"(a.b=c, +x=y).")


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """Every verb's parser: a bad argument is one UsageError line (exit 2), not usage + exit."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def make_parser(verb: str, description: str) -> argparse.ArgumentParser:
    p = Parser(prog=f"llamarl {verb}", description=description, epilog=RECIPE_HELP,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("words", nargs="*", metavar="recipe=NAME | key=value",
                   help="the recipe and Hydra overrides")
    p.add_argument("--cfg", choices=["job"], help="print the resolved config and exit")
    return p


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]):
    args, unknown = parser.parse_known_intermixed_args(argv)
    if unknown:
        raise UsageError(f"{parser.prog}: unknown option(s) {' '.join(unknown)}; see --help")
    bad = [w for w in args.words if "=" not in w]
    if bad:
        raise UsageError(f"{parser.prog}: expected key=value words, got {' '.join(bad)}")
    recipe, overrides = split_recipe_arg(args.words)
    return args, recipe, overrides


def print_resolved(recipe: str, overrides, data_key: str = "data.name",
                   checkpoint_key: str = "model.checkpoint") -> None:
    """The composed config, with `data.instruction` and `data.template` as the run resolves
    them for the data set at `data_key` and the checkpoint at `checkpoint_key` (`llamarl eval`
    passes `eval.data` / `eval.checkpoint`, each falling back to the training one)."""
    cfg = compose_config(recipe, overrides)
    _show_prompt_defaults(cfg, OmegaConf.select(cfg, data_key) or cfg.data.name,
                          OmegaConf.select(cfg, checkpoint_key) or cfg.model.checkpoint)
    print(OmegaConf.to_yaml(cfg), end="")


def _show_prompt_defaults(cfg, data_name: str, checkpoint) -> None:
    """Fill the prompt defaults in; a config that does not bind or a checkpoint whose tokenizer
    does not load is printed as composed (the verbs themselves report those errors)."""
    from llamarl_core.config.schema import DataConfig
    from llamarl_core.data import prompt_format, resolve_template
    from llamarl_core.models import ByteTokenizer, load_tokenizer

    try:
        fmt = prompt_format(DataConfig(**OmegaConf.to_container(cfg.data)), data_name)
        cfg.data.instruction = fmt.instruction
        if fmt.template == "auto":
            tokenizer = load_tokenizer(checkpoint, required=False) if checkpoint else ByteTokenizer()
            cfg.data.template = resolve_template(fmt.template, tokenizer)
    except (ConfigError, TypeError, ValueError, OSError):
        pass


def run_guarded(fn: Callable[[], int]) -> int:
    """Turn the user's mistakes into one line on stderr and exit code 2. Only those: a missing
    file the user named is a ConfigError where it is read; any other error is a failure."""
    try:
        return fn()
    except (ConfigError, UsageError) as e:
        print(f"llamarl: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("llamarl: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a full disk or a read-only directory: say where, not a traceback
        if e.errno not in DISK_FAULTS:
            raise
        print(f"llamarl: error: {disk_fault(e)}", file=sys.stderr)
        return EXIT_USAGE if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) else EXIT_FAILED


DISK_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def disk_fault(e: OSError) -> str:
    """'no space left on device writing /runs/x/metrics.jsonl': what and where, in one line."""
    where = f" writing {e.filename}" if e.filename else ""
    what = (e.strerror or str(e)).lower()
    return f"{what}{where}" + (" (free some space or point run.dir elsewhere)"
                               if e.errno in (errno.ENOSPC, errno.EDQUOT) else "")


__all__ = ["Parser", "make_parser", "parse", "print_resolved", "run_guarded", "load_config", "disk_fault",
           "EXIT_OK", "EXIT_FAILED", "EXIT_USAGE", "UsageError"]
