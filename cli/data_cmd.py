"""`llamarl data`: exactly what the model will see, before a long run.

    llamarl data recipe=R [key=value ...] [n=3] [--json]
    llamarl data model.checkpoint=DIR data.name=gsm8k data.path=../shared/data/gsm8k/train.jsonl

For the first n examples of the train split: the rendered prompt, its token count, the
reference answer and the reward the configured verifier gives the reference solution; then,
over the whole split, the share of references scoring 1.0, prompt lengths (min/median/max)
and how many exceed `generation.max_prompt_tokens`. `--json`: one JSON object per example
(`prompt`, `prompt_ids`, `reference`, `reference_reward`), then one `{"summary": {...}}`.
No model and no torchrun: `llamarl_core.runtime.preview.preview_data` does the work.

    llamarl data tasks    # the reasoning-gym tasks data.task takes, one line each (docs/DATA.md)

With an environment (`env.entry=...` / `env.tools=...`) each example shows its episode's opening
exactly as the model sees it: the messages its `reset` returned (run in the environment's own
worker process, never in this one), rendered by the chat template with the tools where the
template writes them (else in the system message), and its token count; then the loss-mask
legend. Real episodes, as the trainer trained on them, come from a run started with
`logging.trained_samples_per_step=K` (K rows of every step in `<run>/trained_samples.jsonl`):

    llamarl data --episodes runs/NAME [n=3]    # the last n episodes: reward, turns, and the
                                               # environment's (masked) spans as ⟦env: ...⟧
"""
from __future__ import annotations

import os
import sys

import json
import re
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from llamarl_cli.common import EXIT_OK, UsageError, load_config, make_parser, parse, print_resolved, run_guarded

DEFAULT_N = 3
ENV_SPAN = re.compile(r"(⟦env: .*?⟧)", re.S)  # Episode.render's environment spans


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
        if "opening" in row:  # an episode's opening, from its environment's reset
            body, title = Text(row["opening"]), f"example {i} · episode opening · {len(row['opening_ids'])} tokens"
        elif "error" in row:
            body, title = Text(f"reset failed: {row['error']}", style="red"), f"example {i} · episode opening"
        else:
            body, title = Text(row["prompt"]), f"example {i} · {len(row['prompt_ids'])} prompt tokens"
        # Text is literal: a prompt's [brackets] are not rich markup
        body.append(f"\n\nreference: {row['reference']}   reward of the reference solution: "
                    f"{row['reference_reward']:g}", style="bold")
        console.print(Panel(body, title=title, title_align="left"))
    if "env" in s:
        tools = ", ".join(s["env_tools"]) or "none"
        console.print(f"environment {s['env']} · tools: {tools}"
                      + (f" (in the {s['env_tools_in']})" if s["env_tools_in"] else ""))
        console.print(f"loss mask: {s['mask_legend']}")
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


def print_episodes(run_dir: str, n: int, console: Console | None = None) -> None:
    """The last `n` episode rows of `<run_dir>/trained_samples.jsonl`, environment spans dimmed."""
    console = console or Console()
    path = Path(run_dir) / "trained_samples.jsonl"
    if not path.is_file():
        raise UsageError(f"llamarl data --episodes: no {path} (start the run with "
                         f"logging.trained_samples_per_step=K to record K rows per step)")
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if "episode" in r][-n:] if n else []
    if not rows:
        console.print(f"{path}: no episode rows (a run with env.entry or env.tools records them)")
        return
    for r in rows:
        body = Text()
        for k, part in enumerate(ENV_SPAN.split(r["episode"])):  # odd parts: the environment's
            body.append(part, style="dim cyan" if k % 2 else "")
        console.print(Panel(body, title_align="left", title=(
            f"step {r['step']} · v{r['policy_version']} · example {r['example_id']} · "
            f"{r['turns']} turn(s) · reward {r['reward']:g}")))
    console.print("model turns: trained (loss mask 1) · ⟦env: ...⟧ (dim): the environment's tokens, masked (0)")


def print_tasks() -> int:
    """One line per reasoning-gym task: its name and the first line of its description."""
    from llamarl_core.data.reasoning_gym_tasks import task_descriptions

    rows = task_descriptions()
    width = max(len(name) for name, _ in rows)
    text = "\n".join(f"{name:<{width}}  {about}".rstrip() for name, about in rows)
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `llamarl data tasks | head`: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # no second error when Python flushes at exit
    return EXIT_OK


def main(argv) -> int:
    if list(argv[:1]) == ["tasks"]:
        return run_guarded(print_tasks)
    parser = make_parser("data", "Show what the model will see: the first n rendered prompts of the "
                         "train split with their token counts, references and the verifier's reward "
                         "for each reference solution, then statistics over the whole split. Runs no "
                         "model. n=K picks how many examples (default 3). With env.entry/env.tools: "
                         "each episode's opening from the environment's reset, its tools, the "
                         "loss-mask legend; --episodes RUN_DIR prints episodes a run trained on.")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per example, then {\"summary\": {...}}")
    parser.add_argument("--episodes", metavar="RUN_DIR",
                        help="print the last n episodes a run trained on (RUN_DIR/trained_samples.jsonl, "
                             "written with logging.trained_samples_per_step=K), environment spans marked")

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        n, overrides = take_n(overrides)
        if args.episodes:
            print_episodes(args.episodes, n)
            return EXIT_OK
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
