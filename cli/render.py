"""Rich rendering of a launch plan for people (`llamarl plan`, `llamarl train`)."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from llamarl_core.plan.memory import USABLE_FRACTION
from llamarl_core.plan.plan import LaunchPlan
from llamarl_core.plan.recipe_values import describe


def _table(title: str, columns, left=()) -> Table:
    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, collapse_padding=True,
              show_edge=False)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right", no_wrap=True, min_width=len(col))
    return t


def _mb(n: int) -> str:
    return f"{n / 2**20:.3f} MiB ({n} bytes)"


def print_plan(plan: LaunchPlan, console: Console | None = None) -> None:
    console = console or Console()
    title = (f"llamarl plan · recipe {plan.recipe} · {plan.mode} · {plan.model_preset} "
             f"({plan.num_params / 1e9:.3g}B params) · {plan.total_devices} × {plan.device} "
             f"on {plan.nodes} node(s)")
    # Tables fit an 80-column terminal with every header whole: no vertical rules, one space
    # of padding, and columns that never wrap or shorten their header.
    layout = _table(title, ("role", "ranks", "nodes", "tp", "dp", "fsdp", "pp", "dtype", "quant", "threads"),
                    left=("role", "dtype", "quant"))
    memory = _table("memory per device, GiB (formulas: docs/PLAN_MEMORY.md)",
                    ("role", "weights", "grads", "optimizer", "activ.", "kv cache", "total", "capacity",
                     "fits"), left=("role",))
    for r in plan.roles:
        p, m = r.parallelism, r.memory
        nodes = f"{r.nodes[0]}" if len(r.nodes) == 1 else f"{r.nodes[0]}–{r.nodes[-1]}"
        layout.add_row(r.name, f"{r.ranks[0]}–{r.ranks[1]}", nodes, str(p["tp"]), str(p["dp"]),
                       str(p["fsdp"]), str(p["pp"]), r.dtype, r.quantization, str(r.threads))
        ok = m.total <= USABLE_FRACTION * r.capacity_gib
        memory.add_row(r.name, *(f"{v:.2f}" for v in (m.weights, m.gradients, m.optimizer,
                                                         m.activations, m.kv_cache)),
                       f"[bold]{m.total:.2f}[/]", f"{r.capacity_gib:.1f}",
                       "[green]yes[/]" if ok else "[red]NO[/]")
    console.print(layout)
    console.print(memory)
    for r in plan.roles:  # a fifth term only when on: the table stays within 80 columns
        if r.memory.reference:
            console.print(f"{r.name} total includes the KL reference (algorithm.kl_coef > 0): "
                          f"{r.memory.reference:.2f} GiB per device, sharded like the trained weights")
    flow = [f"{r.name} {what}" for r in plan.roles for on, what in (
        (r.name == "generator", "streams prompts across steps (executors/stream.py)"),
        (r.stream_groups, "starts micro-batches as groups arrive (resources.trainer.stream_groups)"),
        (r.env_workers, f"runs each row as a multi-turn episode, its environment in {r.env_workers} "
                        f"worker process(es) per rank (env.workers; envs/pool.py)")) if on]
    if flow:
        console.print("pipeline: " + "; ".join(flow), soft_wrap=True)
    if plan.weight_sync:
        w = plan.weight_sync
        also = "" if w["bytes_per_version"] == w["full_bytes"] else f" (full weights: {_mb(w['full_bytes'])})"
        console.print(f"weight sync per version, per generator rank: {_mb(w['bytes_per_version'])} "
                      f"of {w['what']}{also}", soft_wrap=True)
    if plan.predicted:
        s, a = plan.predicted["sync"], plan.predicted["async"]
        console.print(f"predicted RL step time (scale simulator): sync {s:.2f} s, async {a:.2f} s "
                      f"({s / a:.2f}×)")
    for r in plan.roles:
        for i, cmd in enumerate(r.commands):
            label = r.name if len(r.commands) == 1 else f"{r.name} node {r.nodes[i]}"
            console.print(f"[bold]{label}[/]: {cmd}", soft_wrap=True)
            if i == 2 and len(r.commands) > 4:
                console.print(f"  … {len(r.commands) - 4} more node commands (see --json) …")
                break
    if plan.set_by_recipe:
        text = describe(plan.set_by_recipe)
        if text:
            console.print(text, soft_wrap=True, markup=False, highlight=False)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {w}")
