"""`llamarl train`: plan, launch one torchrun group per role, supervise, report."""
from __future__ import annotations

import json
import os
import sys

from rich.console import Console
from rich.markup import escape

from llamarl_cli.common import EXIT_FAILED, EXIT_OK, UsageError, load_config, make_parser, parse, print_resolved, run_guarded
from llamarl_core.observe.end_reason import end_line
from llamarl_core.plan.plan import make_plan
from llamarl_core.plan.recipe_values import set_by_recipe
from llamarl_core.runtime.controller import Controller
from llamarl_core.runtime.data_check import check_data
from llamarl_core.runtime.devices import check_host
from llamarl_core.runtime.live_view import LiveView
from llamarl_core.runtime.run_dir import resolve_run_dir


def main(argv) -> int:
    parser = make_parser("train", "Run RL post-training: a controller process launches one torchrun "
                         "group per role (generator, reward, trainer; or the colocated actor when "
                         "algorithm.max_offpolicy_steps=0) and supervises them.")

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        cfg = load_config(recipe, overrides)
        checked = make_plan(cfg, require_data=True)  # validate before creating anything
        nodes = checked.nodes
        if nodes > 1:
            words = " ".join([f"recipe={recipe}", *overrides])
            raise UsageError(f"llamarl train runs one host, but this plan has {nodes} nodes: write it with "
                             f"`llamarl plan {words} --out RUN_DIR` and start `llamarl node "
                             f"plan=RUN_DIR/plan.json node_rank=K` on every node, or submit "
                             f"`llamarl plan {words} --slurm > job.sbatch`")
        check_host(checked, cfg.recipe)
        for line in check_data(cfg):  # data and reward, before the run directory or any process
            print(line)
        run_dir = resolve_run_dir(cfg)
        plan = make_plan(cfg, run_dir=run_dir, require_data=True)
        plan.set_by_recipe = set_by_recipe(recipe, overrides, cfg.model.checkpoint)
        console = Console()
        from llamarl_cli.render import print_plan
        print_plan(plan, console)
        console.print(f"run directory: {run_dir}")
        with LiveView(console, cfg) as view:
            result = Controller(cfg, plan, run_dir, view).run()
            view.finish(end_line(read_summary(result.run_dir)))  # why it ended, in words
        return report(result, console, resume_command(recipe, overrides, run_dir))

    return run_guarded(run)


def resume_command(recipe: str, overrides: list[str], run_dir: str) -> str:
    """The same command, continuing run_dir from its newest stable checkpoint."""
    import shlex

    kept = [w for w in overrides if not w.lstrip("+~").startswith(("run.dir=", "run.resume="))]
    return shlex.join(["llamarl", "train", f"recipe={recipe}", *kept, f"run.dir={run_dir}", "run.resume=auto"])


def read_summary(run_dir: str) -> dict:
    try:  # a failed run may have none, or half of one
        with open(os.path.join(run_dir, "summary.json")) as f:
            s = json.load(f)
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def report(result, console: Console, resume_with: str | None = None) -> int:
    s = read_summary(result.run_dir)
    for w in s.get("warnings", ()):  # a run that could not learn says so last (observe/learning_signal.py)
        console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    if end_line(s):  # why it ended, also without the panel (observe/end_reason.py)
        console.print(end_line(s), soft_wrap=True, highlight=False, markup=False)  # a role's error text: [/a/b.cc:1]
    if result.ok:
        if s:
            before, after = s.get("accuracy_before"), s.get("accuracy_after")
            if before is not None and after is not None:
                console.print(f"held-out accuracy: {before:.3f} → {after:.3f} "
                              f"({s['steps']} RL steps in {s['rl_wall_s']:.0f} s)")
        console.print(f"[green]done[/]: {result.run_dir}")
        return EXIT_OK
    print(f"llamarl train: run failed: {result.message}", file=sys.stderr)
    if result.log_tail:
        role, rank = result.failed
        print(f"--- last lines of {role} rank {rank}'s log ---\n{result.log_tail}", file=sys.stderr)
    print(f"logs: {os.path.join(result.run_dir, 'logs')}", file=sys.stderr)
    from llamarl_core.runtime.resume import newest_valid
    stable = newest_valid(result.run_dir, log=None)  # never a truncated or planted one
    if stable and resume_with:
        print(f"continue from {stable} with: {resume_with}", file=sys.stderr)
    return EXIT_FAILED
