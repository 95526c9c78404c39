"""`llamarl data`: exactly what the model will see, before a long run.

    llamarl data recipe=R [key=value ...] [n=3] [--json]
    llamarl data model.checkpoint=DIR data.name=gsm8k data.path=../shared/data/gsm8k/train.jsonl

For the first n examples of the train split: the rendered prompt, its token count, the
reference answer and the reward the configured verifier gives the reference solution; then,
over the whole split, the share of references scoring 1.0, prompt lengths (min/median/max)
and how many exceed `generation.max_prompt_tokens`. `--json`: one JSON object per example
(`prompt`, `prompt_ids`, `reference`, `reference_reward`), then one `{"summary": {...}}`.
No model and no torchrun: `llamarl_core.runtime.preview.preview_data` does the work.
"""
from __future__ import annotations

import json

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llamarl_cli.common import EXIT_OK, UsageError, load_config, make_parser, parse, print_resolved, run_guarded

DEFAULT_N = 3


def take_n(overrides: list[str]) -> tuple[int, list[str]]:
    """`n=K` (examples to show) out of the Hydra overrides."""
    n, rest = DEFAULT_N, []
    for word in overrides:
        if word.startswith("n="):
            value = word[2:]
            if not value.isdigit():
                raise UsageError(f"llamarl data: n={value!r} must be a whole number >= 0")
            n = int(value)
        else:
            rest.append(word)
    return n, rest


def print_preview(view, console: Console | None = None) -> None:
    console = console or Console()
    s = view.summary
    for i, row in enumerate(view.rows):
        body = Text(row["prompt"])  # literal: a prompt's [brackets] are not rich markup
        body.append(f"\n\nreference: {row['reference']}   reward of the reference solution: "
                    f"{row['reference_reward']:g}", style="bold")
        console.print(Panel(body, title=f"example {i} · {len(row['prompt_ids'])} prompt tokens",
                            title_align="left"))
    table = Table(title=f"llamarl data · {s['data']} (train) · {s['num_examples']} examples · "
                        f"template {s['template']} · reward {s['reward']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("references scoring 1.0", f"{s['reference_reward_1_share']:.2%}")
    table.add_row("mean reward of the references", f"{s['reference_reward_mean']:.4f}")
    table.add_row("prompt tokens min / median / max",
                  f"{s['prompt_tokens_min']} / {s['prompt_tokens_median']:g} / {s['prompt_tokens_max']}")
    table.add_row(f"prompts over generation.max_prompt_tokens={s['max_prompt_tokens']}",
                  str(s["num_over_max_prompt_tokens"]))
    table.add_row("tokenizer", str(s["tokenizer"]))
    console.print(table)


def main(argv) -> int:
    parser = make_parser("data", "Show what the model will see: the first n rendered prompts of the "
                         "train split with their token counts, references and the verifier's reward "
                         "for each reference solution, then statistics over the whole split. Runs no "
                         "model. n=K picks how many examples (default 3).")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per example, then {\"summary\": {...}}")

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        n, overrides = take_n(overrides)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        cfg = load_config(recipe, overrides)
        from llamarl_core.runtime.preview import preview_data

        view = preview_data(cfg, n)
        if args.json:
            for row in view.rows:
                print(json.dumps(row, ensure_ascii=False))
            print(json.dumps({"summary": view.summary}, ensure_ascii=False))
        else:
            print_preview(view)
        return EXIT_OK

    return run_guarded(run)
