"""`llamarl bench`: the measured sync-vs-async comparison, weight-sync bandwidth, scale simulator.

    llamarl bench --sync-vs-async [recipe=R] [--steps N] [--repeats N] [--out FILE]
    llamarl bench --quality [recipe=R] [--seeds N] [--steps N] [--out FILE]
    llamarl bench --sync-vs-async --simulate [recipe=R] [--out FILE]
    llamarl bench --sync-vs-async --simulate recipe=cpu_tiny [--measured FILE] [--steps N] [--repeats N] [--out FILE]
    llamarl bench --weight-sync [--sizes-mb 10 64 256 1024] [--repeats N] [--out FILE]
    llamarl bench --weight-sync --layout 1:1 --layout 2:1 --layout 2:2 [--sizes-mb 1024] [--out FILE]

Each writes one JSON (and, for --sync-vs-async and --quality, two PNGs beside it) and prints a
table. The JSON goes to --out, else into the work dir (--work-dir, else
./runs/bench/<benchmark>-<time>); temporary files (TMPDIR, checkpoints, and with the default work
dir the run directories) are removed when the bench ends: llamarl_core/bench/work_dir.py.
"""
from __future__ import annotations

import json
import os
import shlex
import sys

from rich.console import Console

from llamarl_cli.common import (EXIT_FAILED, EXIT_OK, UsageError, load_config, make_parser, parse,
                                print_resolved, run_guarded)


def _parser():
    p = make_parser("bench", "Benchmarks. --sync-vs-async runs the recipe synchronously "
                    "(max_offpolicy_steps=0, colocated) and asynchronously (k>=1, split roles), "
                    "alternating; --simulate predicts both at cluster scale instead; "
                    "--weight-sync measures each weight transport against memcpy.")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sync-vs-async", action="store_true", help="measure (or --simulate) sync vs async")
    mode.add_argument("--weight-sync", action="store_true", help="weight-sync GB/s vs memcpy")
    mode.add_argument("--quality", action="store_true",
                      help="held-out accuracy per RL sample: sync k=0 vs async k=1/k=4 with AIPO, "
                           "no correction and PPO clipping, from one shared warm start")
    p.add_argument("--simulate", action="store_true", help="with --sync-vs-async: the scale simulator")
    p.add_argument("--steps", type=int, default=None,
                   help="RL steps per run (default 8; --quality: 30)")
    p.add_argument("--seeds", type=int, default=3, help="--quality: seeds per configuration (default 3)")
    p.add_argument("--configs", default=None, metavar="A,B",
                   help="--quality: run only these configurations (comma-separated; default all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="sync/async pairs (default 2) or weight-sync repeats (default 5)")
    p.add_argument("--target-accuracy", type=float, default=0.5,
                   help="report wall seconds to the first eval at or above this (default 0.5)")
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 64, 256, 1024],
                   help="--weight-sync message sizes in MiB")
    p.add_argument("--layout", action="append", default=[], metavar="T:G",
                   help="--weight-sync: DDMA from T trainer ranks to G generator ranks (repeatable); "
                        "adds a 'layouts' list to the JSON, keeping its other cases")
    p.add_argument("--measured", default=None, metavar="FILE",
                   help="--simulate on a CPU recipe: reuse this measured --sync-vs-async JSON (its run "
                        "directories must still exist) instead of running the measured bench")
    p.add_argument("--work-dir", default=None,
                   help="where the runs and the JSON go, kept with each run's logs and metrics "
                        "(default: ./runs/bench/<benchmark>-<time>, keeping only the JSON and PNGs)")
    p.add_argument("--out", default=None, help="JSON path (PNGs go beside it; default: in the work dir)")
    return p


def main(argv) -> int:
    parser = _parser()

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        if args.weight_sync:
            return _in_work_dir(args, "weight_sync", lambda: _weight_sync(args, argv))
        if args.quality:
            return _in_work_dir(args, "quality", lambda: _quality(recipe, overrides, args, argv))
        if not args.sync_vs_async:
            raise UsageError("llamarl bench: choose --sync-vs-async [--simulate], --quality or --weight-sync")
        if args.simulate:
            recipe_given = any(w.startswith("recipe=") for w in args.words)
            cfg = load_config(recipe, overrides) if recipe_given else None
            if cfg is not None and cfg.resources.device == "cpu":
                return _in_work_dir(args, "sync_vs_async_simulated",
                                    lambda: _simulate_cpu(cfg, recipe, overrides, args, argv))
            command = " ".join(["llamarl", "bench", *map(shlex.quote, argv)])
            return _in_work_dir(args, "simulator",
                                lambda: _simulate(recipe if recipe_given else None, overrides, args.out, command))
        return _in_work_dir(args, "sync_vs_async", lambda: _sync_vs_async(recipe, overrides, args, argv))

    return run_guarded(run)


def _in_work_dir(args, benchmark: str, run) -> int:
    """Run one bench mode in its work dir (bench/work_dir.py): `args.work_dir` becomes that
    dir and `args.out` its JSON path; temporary files are removed however the mode ends."""
    from llamarl_core.bench.work_dir import BenchWorkDir

    with BenchWorkDir(args.work_dir, benchmark) as wd:
        print(f"llamarl bench: work dir {wd.path}", flush=True)
        args.work_dir, args.out = wd.path, os.path.abspath(wd.json_path(args.out))
        code = run()
        wd.failed = code != EXIT_OK
    return code


def _write(out: str | None, result: dict, console: Console, command: str | None = None) -> None:
    """Write `result` to `out` as JSON, with its `commit` (and `command`, where given) recorded."""
    if out:  # always given by `llamarl bench` (its work dir's JSON by default)
        from llamarl_core.bench.provenance import git_commit
        if command is not None:
            result["command"] = command
        result.setdefault("commit", git_commit())
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        console.print(f"wrote {out}", soft_wrap=True, highlight=False)  # a path to copy: never wrapped


def _weight_sync(args, argv) -> int:
    from llamarl_core.bench.weight_sync_bench import print_table, run_weight_sync_bench

    repeats = 5 if args.repeats is None else args.repeats
    if repeats < 1:
        raise UsageError(f"llamarl bench: --repeats={repeats} must be >= 1")
    if args.layout:
        return _layouts(args, repeats, argv)
    print_table(run_weight_sync_bench(sizes_mb=args.sizes_mb, repeats=repeats, out=args.out))
    if args.out:
        print(f"wrote {args.out}")
    return EXIT_OK


def _layouts(args, repeats: int, argv) -> int:
    import os

    from llamarl_core.bench.ddma_bench import parse_layout, print_layouts, run_layout_bench

    try:
        layouts = [parse_layout(x) for x in args.layout]
    except ValueError as e:
        raise UsageError(f"llamarl bench: {e}") from None
    if len(args.sizes_mb) != 1:
        raise UsageError("llamarl bench: --layout measures one size; give one --sizes-mb (e.g. 1024)")
    cases = run_layout_bench(layouts, size_mb=args.sizes_mb[0], repeats=repeats)
    print_layouts(cases)
    if args.out:
        result = json.loads(open(args.out).read()) if os.path.exists(args.out) else {}
        result["layouts"] = cases
        result["layouts_loadavg"] = list(os.getloadavg())
        from llamarl_core.bench.provenance import git_commit
        result["layouts_command"] = " ".join(["llamarl", "bench", *map(shlex.quote, argv)])
        result["layouts_commit"] = git_commit()
        _write(args.out, result, Console())
    return EXIT_OK


def _sync_vs_async(recipe, overrides, args, argv) -> int:
    from llamarl_core.bench.report import sync_vs_async_table
    from llamarl_core.bench.sync_vs_async import run_sync_vs_async

    repeats = 2 if args.repeats is None else args.repeats
    steps = 8 if args.steps is None else args.steps
    if steps < 1 or repeats < 1:
        raise UsageError(f"llamarl bench: --steps={steps} and --repeats={repeats} must be >= 1")
    return _run_measured(lambda **kw: run_sync_vs_async(recipe, overrides, steps=steps, repeats=repeats,
                                                        target_accuracy=args.target_accuracy, **kw),
                         sync_vs_async_table, _sync_vs_async_plots, args, argv)


def _run_measured(run, table, draw, args, argv) -> int:
    """Run a measured bench (`run(work_dir=, log=, command=)`), print its table, write its
    JSON and pictures; a run that failed is one line on stderr and exit 1."""
    from llamarl_core.bench.sync_vs_async import BenchRunFailed

    console = Console()
    try:
        result = run(work_dir=args.work_dir, log=console.print,
                     command=" ".join(["llamarl", "bench", *map(shlex.quote, argv)]))
    except BenchRunFailed as e:
        print(f"llamarl bench: {e}", file=sys.stderr)
        return EXIT_FAILED
    console.print(table(result))
    if args.out:
        write_with_plots(args.out, result, console, draw)
    return EXIT_OK


def write_with_plots(out: str, result: dict, console: Console, draw=None) -> None:
    """The JSON first (the runs are the expensive part), then the PNGs beside it, which need
    the optional plotting extra: without it, one line says so and the JSON stands.
    `draw(result, out) -> {name: png}` makes the pictures (default: sync-vs-async's two)."""
    _write(out, result, console)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("llamarl bench: plots skipped: matplotlib is not installed "
              "(pip install 'llamarl[bench]')", file=sys.stderr)
        return
    result["plots"] = (draw or _sync_vs_async_plots)(result, out)
    _write(out, result, console)


def _sync_vs_async_plots(result: dict, out: str) -> dict:
    from llamarl_core.bench.plots import plot_accuracy, plot_paths, plot_timeline

    timeline_png, accuracy_png = plot_paths(out)
    dirs = {m: result[m]["runs"][0]["run_dir"] for m in ("sync", "async")}
    return {"timeline": plot_timeline(dirs, timeline_png), "accuracy": plot_accuracy(result, accuracy_png)}


def _quality_plots(result: dict, out: str) -> dict:
    from llamarl_core.bench.quality_plots import plot_curves, plot_staleness, quality_plot_paths

    curves_png, staleness_png = quality_plot_paths(out)
    return {"curves": plot_curves(result, curves_png), "staleness": plot_staleness(result, staleness_png)}


def _quality(recipe, overrides, args, argv) -> int:
    from llamarl_core.bench.quality import run_quality, select_configs
    from llamarl_core.bench.report import quality_table

    from llamarl_core.bench.quality import DEFAULT_STEPS
    steps = DEFAULT_STEPS if args.steps is None else args.steps
    if steps < 1 or args.seeds < 1:
        raise UsageError(f"llamarl bench: --steps={steps} and --seeds={args.seeds} must be >= 1")
    names = args.configs.split(",") if args.configs else None
    try:
        select_configs(names)
    except ValueError as e:
        raise UsageError(f"llamarl bench: {e}") from None
    return _run_measured(lambda **kw: run_quality(recipe, overrides, seeds=args.seeds, steps=steps,
                                                  configs=names, **kw),
                         quality_table, _quality_plots, args, argv)


def _simulate(recipe, overrides, out, command: str) -> int:
    from llamarl_core.bench.report import simulate_recipe

    console = Console()
    cfg = load_config(recipe, overrides) if recipe else None
    result = simulate_recipe(cfg, console)
    _write(out, result, console, command)
    return EXIT_OK


def _simulate_cpu(cfg, recipe, overrides, args, argv) -> int:
    """Predicted (sim/cpu.py, this CPU's constants) beside measured (the sync-vs-async bench)."""
    from llamarl_core.bench.report import predicted_vs_measured_table
    from llamarl_core.bench.sim_cpu import simulate_cpu_recipe
    from llamarl_core.bench.sync_vs_async import BenchRunFailed, run_sync_vs_async

    repeats = 2 if args.repeats is None else args.repeats
    steps = 8 if args.steps is None else args.steps
    if steps < 1 or repeats < 1:
        raise UsageError(f"llamarl bench: --steps={steps} and --repeats={repeats} must be >= 1")
    if args.measured and not os.path.exists(args.measured):
        raise UsageError(f"llamarl bench: --measured {args.measured}: no such file")
    console = Console()
    command = " ".join(["llamarl", "bench", *map(shlex.quote, argv)])

    def run_measured(log, between_runs):
        return run_sync_vs_async(recipe, overrides, steps=steps, repeats=repeats,
                                 target_accuracy=args.target_accuracy, work_dir=args.work_dir, log=log,
                                 command=command, between_runs=between_runs)
    try:
        result = simulate_cpu_recipe(cfg, run_measured, measured_json=args.measured, log=console.print)
    except BenchRunFailed as e:
        print(f"llamarl bench: {e}", file=sys.stderr)
        return EXIT_FAILED
    result["command"] = command
    console.print(predicted_vs_measured_table(result))
    _write(args.out, result, console)
    return EXIT_OK
