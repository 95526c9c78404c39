"""`llamarl plan`: what `train` would launch, checked before anything starts.

    llamarl plan recipe=R                    # the table and every torchrun line
    llamarl plan recipe=R --json             # the same as one JSON object
    llamarl plan recipe=R --out RUN_DIR      # write RUN_DIR/plan.json for `llamarl node`, start nothing
    llamarl plan recipe=R --slurm > job.sbatch
"""
from __future__ import annotations

import json
import os
import secrets
import sys

from llamarl_cli.common import EXIT_OK, UsageError, load_config, make_parser, parse, print_resolved, run_guarded
from llamarl_core.plan.plan import make_plan
from llamarl_core.plan.recipe_values import set_by_recipe

SET_BY_SLURM = ("resources.hostnames=", "controller.host=")


def main(argv) -> int:
    parser = make_parser("plan", "Resolve a recipe into a launch plan: per role its global ranks, "
                         "nodes, TP/DP/FSDP/PP, dtype, quantization, per-device memory against "
                         "capacity, and the exact torchrun command lines `train` execs.")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object to stdout")
    out.add_argument("--out", metavar="RUN_DIR", help="write RUN_DIR/plan.json (plan, resolved config, "
                     "controller address, run id) for `llamarl node`; starts nothing")
    out.add_argument("--slurm", action="store_true", help="print a SLURM batch script for the plan")
    parser.add_argument("--run-id", help="with --out: use this run id (default: a random one)")

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        if args.run_id and not args.out:
            raise UsageError("llamarl plan: --run-id goes with --out")
        if args.slurm:
            return _slurm(recipe, overrides)
        cfg = load_config(recipe, overrides)
        inherited = set_by_recipe(recipe, overrides, cfg.model.checkpoint)
        if args.out:
            return _write(cfg, args.out, args.run_id, inherited)
        plan = make_plan(cfg, require_data=False)
        plan.set_by_recipe = inherited
        if args.json:
            print(json.dumps(plan.to_json(), indent=2))
        else:
            from llamarl_cli.render import print_plan
            print_plan(plan)
        return EXIT_OK

    return run_guarded(run)


def _write(cfg, out: str, run_id: str | None, inherited: dict) -> int:
    from llamarl_core.runtime.node import check_outputs
    from llamarl_core.runtime.run_dir import check_writable, resolve_resume, write_run_files
    from llamarl_core.runtime.run_lock import check_free
    from llamarl_core.transport.control import free_port

    run_dir = os.path.abspath(out)
    check_writable(run_dir)
    check_free(run_dir)
    if cfg.run.resume:  # the plan names the checkpoint: every node reads the same one
        resolve_resume(cfg, run_dir)
    elif os.path.isdir(run_dir):
        check_outputs(run_dir, cfg)  # never a fresh plan over a run's outputs
    plan = make_plan(cfg, run_dir=run_dir, require_data=True)  # nodes will run it: data must exist
    plan.set_by_recipe = inherited
    os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
    host = cfg.controller.host
    port = cfg.controller.port or free_port(host)  # fixed now: every node reads it from plan.json
    write_run_files(run_dir, cfg, plan, host, port, run_id=run_id)
    print(f"wrote {run_dir}/plan.json: run {plan.run_id}, {plan.nodes} node(s), controller "
          f"{host}:{port}")
    for k in range(plan.nodes):
        print(f"  node {k}: llamarl node plan={run_dir}/plan.json node_rank={k}")
    if inherited["advice"]:
        print(inherited["advice"], file=sys.stderr)
    for w in plan.warnings:
        print(f"warning: {w}", file=sys.stderr)
    return EXIT_OK


def _slurm(recipe: str, overrides: list[str]) -> int:
    from llamarl_core.plan.slurm import render_sbatch

    dropped = [w for w in overrides if w.startswith(SET_BY_SLURM)]
    if dropped:
        print(f"llamarl plan: the script sets these from the allocation, ignoring: {' '.join(dropped)}",
              file=sys.stderr)
    kept = [w for w in overrides if not w.startswith(SET_BY_SLURM)]
    cfg = load_config(recipe, kept)
    plan = make_plan(cfg, require_data=False)  # checked now; the job re-plans with its hosts
    gpus = 0
    if plan.device != "cpu":
        from llamarl_core.config.hardware import get_device
        gpus = cfg.resources.devices_per_node or get_device(plan.device).devices_per_node
    print(render_sbatch(recipe, kept, plan.nodes, gpus, secrets.token_hex(4)), end="")
    for w in plan.warnings:
        if not w.startswith("controller.host="):  # the script sets controller.host to node 0
            print(f"warning: {w}", file=sys.stderr)
    return EXIT_OK
