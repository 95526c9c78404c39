"""`llamarl eval`: accuracy, pass@k and maj@k of a checkpoint (or of the references).

    llamarl eval checkpoint=PATH data=gsm8k data.path=../shared/data/gsm8k/test.jsonl \\
        n_samples=4 temperature=0.8 max_new_tokens=256 [--out summary.json]
    llamarl eval policy=reference data=math500 data.path=...   # check data + verifier first

The short words below are `eval.<word>` overrides; every other key=value word is a Hydra
override of the recipe (`data.path=...`, `resources.generator.num_devices=2`, ...).
The work is `llamarl_core.eval.run.run_eval`; this file parses, renders and sets exit codes.
A checkpoint under `<run>/checkpoints/` brings its run's config.yaml (`run_config_recipe`).
"""
from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from llamarl_cli.common import EXIT_FAILED, EXIT_OK, load_config, make_parser, parse, print_resolved, run_guarded

SHORT_WORDS = ("checkpoint", "data", "n_samples", "temperature", "max_new_tokens", "policy",
               "split", "num_examples")


def expand_short_words(overrides: list[str]) -> list[str]:
    """`n_samples=4` → `eval.n_samples=4`; `data.path=x` and the rest stay as they are."""
    out = []
    for word in overrides:
        key, _, value = word.partition("=")
        out.append(f"eval.{key}={value}" if key in SHORT_WORDS else word)
    return out


def words_first(argv, flags_with_value=("--out", "--cfg")) -> list[str]:
    """Put key=value words before flags: argparse stops collecting the positional words at
    the first flag, so `--out f.json data.path=x` would reject `data.path=x`."""
    words, flags, i = [], [], 0
    while i < len(argv):
        token = argv[i]
        if token in flags_with_value and i + 1 < len(argv):
            flags += [token, argv[i + 1]]
            i += 2
            continue
        (flags if token.startswith("-") else words).append(token)
        i += 1
    return words + flags


def run_config_recipe(argv, recipe: str, overrides: list[str]) -> tuple[str, list[str]]:
    """A checkpoint a run saved (`<run>/checkpoints/<name>`) is evaluated under that run's
    config.yaml (data path, split settings, seeds) unless `recipe=` is given, so `split=test`
    scores the rows that run held out. Outputs then go to `<run>/eval-<split>` (never over the
    run's own summary.json) unless `run.dir=` or `out=` says where."""
    checkpoint = next((w.split("=", 1)[1] for w in overrides if w.startswith("eval.checkpoint=")), None)
    if not checkpoint or any(w.startswith("recipe=") for w in argv):
        return recipe, overrides
    path = Path(checkpoint)
    run_config = path.parent.parent / "config.yaml"
    if path.parent.name != "checkpoints" or not run_config.is_file():
        return recipe, overrides
    split = next((w.split("=", 1)[1] for w in overrides if w.startswith("eval.split=")), "test")
    if not any(w.startswith(("run.dir=", "eval.out=")) for w in overrides):
        overrides = [*overrides, f"run.dir={path.parent.parent / f'eval-{split}'}"]
    print(f"eval: the run's config {run_config} (recipe=... to use another)")
    return str(run_config), overrides


def print_summary(summary: dict, run_dir, console: Console | None = None) -> None:
    console = console or Console()
    title = (f"llamarl eval · {summary['data']} ({summary['split']}) · policy {summary['policy']}"
             f" · reward {summary['reward']} · {summary['n_examples']} examples"
             f" × {summary['n_samples']} sample(s) at T={summary['temperature']}")
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("accuracy (greedy)", f"{summary['accuracy']:.4f}")
    for k, v in summary["pass@k"].items():
        table.add_row(f"pass@{k}", f"{v:.4f}")
    for k, v in summary["maj@k"].items():
        if int(k) > 1:
            table.add_row(f"maj@{k}", f"{v:.4f}")
    table.add_row("mean reward", f"{summary['mean_reward']:.4f}")
    table.add_row("truncated (hit max_new_tokens)", f"{summary['truncated_fraction']:.2%}")
    table.add_row("mean completion tokens", f"{summary['mean_completion_tokens']:.1f}")
    if "turns_mean" in summary:  # episodes (env.entry / env.tools)
        table.add_row("episodes: turns / tool calls (mean)",
                      f"{summary['turns_mean']:.2f} / {summary['tool_calls_mean']:.2f}")
        table.add_row("episodes: tool errors · truncated",
                      f"{summary['tool_errors']} · {summary['truncated_frac']:.2%}")
    table.add_row("ranks · seconds · tokens/s",
                  f"{summary['num_ranks']} · {summary['elapsed_s']:.1f} · {summary['tokens_per_s']:.0f}")
    console.print(table)
    console.print(f"predictions and summary: {run_dir}")


def main(argv) -> int:
    parser = make_parser("eval", "Evaluate a checkpoint with the generation engine and the training "
                         "verifiers: greedy accuracy, pass@1, unbiased pass@k and maj@k for every "
                         "k <= n_samples. Short words: " + ", ".join(f"{w}=" for w in SHORT_WORDS)
                         + " (eval.<word>). policy=reference scores the data set's own solutions.")
    parser.add_argument("--out", metavar="FILE", help="also write the summary JSON to FILE")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")

    def run() -> int:
        args, recipe, overrides = parse(parser, words_first(list(argv)))
        overrides = expand_short_words(overrides)
        recipe, overrides = run_config_recipe(argv, recipe, overrides)
        if args.cfg:
            print_resolved(recipe, overrides, data_key="eval.data", checkpoint_key="eval.checkpoint")
            return EXIT_OK
        cfg = load_config(recipe, overrides)
        from llamarl_core.bench.provenance import git_commit
        from llamarl_core.eval.run import run_eval

        command = "llamarl eval " + " ".join(argv)
        try:
            result, run_dir = run_eval(cfg, progress=not args.no_progress and sys.stderr.isatty(),
                                       out_file=args.out, extra={"command": command, "commit": git_commit()},
                                       say=print)
        except RuntimeError as e:  # a replica failed; torchrun ended the others
            print(f"llamarl: error: {e}", file=sys.stderr)
            return EXIT_FAILED
        print_summary(result.summary, run_dir)
        return EXIT_OK

    return run_guarded(run)
