"""`llamarl node`: run one node's share of a plan written by `llamarl plan --out`.

    llamarl node plan=RUN_DIR/plan.json node_rank=K [--dry-run]

Node 0 also runs the controller (its TCPStore on the plan's address); every other node joins
it. Start the nodes in any order. `--dry-run` prints what node K would start and exits.
Exit codes: 0 run done, 1 run failed (or the controller unreachable), 2 bad input (missing
plan, a field missing or out of range, node_rank out of range, a plan of another run than the
controller's). The torchrun lines are rebuilt from the plan's checked fields, never read from
its `commands` strings (runtime/plan_file.py).
"""
from __future__ import annotations

import sys

from rich.console import Console

from llamarl_cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, make_parser, run_guarded


def _words(argv) -> tuple[dict, bool]:
    parser = make_parser("node", "Run node K's share of a plan: its torchrun groups (static "
                         "rendezvous, ranks from --node-rank) and, on node 0, the controller.")
    parser.add_argument("--dry-run", action="store_true", help="print node K's commands, start nothing")
    args, unknown = parser.parse_known_intermixed_args(argv)
    if unknown:
        raise UsageError(f"llamarl node: unknown option(s) {' '.join(unknown)}; see --help")
    words = dict(w.partition("=")[::2] for w in args.words)
    extra = set(words) - {"plan", "node_rank"}
    if extra or "plan" not in words or "node_rank" not in words:
        raise UsageError("llamarl node: expected plan=RUN_DIR/plan.json node_rank=K"
                         + (f" (unknown: {', '.join(sorted(extra))})" if extra else ""))
    if not words["node_rank"].isdigit():
        raise UsageError(f"llamarl node: node_rank={words['node_rank']!r} must be an integer >= 0")
    return words, args.dry_run


def main(argv) -> int:
    def run() -> int:
        words, dry_run = _words(list(argv))
        from llamarl_core.runtime.node import share_commands
        from llamarl_core.runtime.plan_file import load_plan

        plan, cfg = load_plan(words["plan"])  # ConfigError (exit 2) naming the file and key
        node_rank = int(words["node_rank"])
        commands = share_commands(plan, cfg, node_rank)  # ConfigError when out of range
        if dry_run:
            addr = plan.controller
            if node_rank == 0:
                print(f"controller: TCPStore on {addr.host}:{addr.port} (run {plan.run_id})")
            for role, cmd in commands:
                print(f"{role}: {cmd}")
            return EXIT_OK
        if node_rank == 0:  # the controller's node: data and reward, before the store or any process
            from llamarl_core.runtime.data_check import check_data
            for line in check_data(cfg):
                print(line)
        return _run_node(plan, cfg, node_rank)

    return run_guarded(run)


def _run_node(plan, cfg, node_rank: int) -> int:
    from llamarl_core.runtime.node import NodeAgent, NodeController
    from llamarl_core.transport.control import ControllerUnreachable, RunMismatch

    console = Console()
    if node_rank == 0:
        from llamarl_cli.train_cmd import read_summary, report
        from llamarl_core.observe.end_reason import end_line
        from llamarl_core.runtime.live_view import LiveView
        addr = plan.controller
        console.print(f"node 0: controller on {addr.host}:{addr.port}, run {plan.run_id}, "
                      f"{plan.nodes} node(s); run directory {plan.run_dir}")
        with LiveView(console, cfg) as view:
            result = NodeController(plan, cfg, view).run()
            view.finish(end_line(read_summary(result.run_dir)))
        again = (f"llamarl plan recipe={cfg.recipe} <the same overrides> run.resume=auto --out {plan.run_dir}"
                 f", then `llamarl node plan={plan.run_dir}/plan.json node_rank=K` on every node")
        return report(result, console, again)
    try:
        result = NodeAgent(plan, cfg, node_rank, log=console.print).run()
    except RunMismatch as e:
        print(f"llamarl node: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ControllerUnreachable as e:
        print(f"llamarl node {node_rank}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if result.ok:
        console.print(f"node {node_rank}: done")
        return EXIT_OK
    print(f"llamarl node {node_rank}: run failed: {result.message}", file=sys.stderr)
    return EXIT_FAILED
