"""`llamarl bench NAME [options]`: one subcommand per benchmark, so that every row of
docs/RESULTS.md is reproduced by one `llamarl bench NAME ...` (or `llamarl train`) command.

    llamarl bench                       # the names, one line each (BENCHES)
    llamarl bench NAME --help           # its options
    llamarl bench sync-vs-async [recipe=R] [--steps N] [--repeats N] [--simulate [--measured FILE]] [--out FILE]
    llamarl bench quality [recipe=R] [--seeds N] [--steps N] [--configs A,B] [--out FILE]
    llamarl bench weight-sync|generation|generation-real|launch|real-model|slots|streaming|env-busy|agent|lora*|losses|...  [options]

sync-vs-async and quality take a recipe and Hydra overrides as `llamarl train` does and are
driven from here; each of the others is a module of llamarl_core/bench/ with `parser(prog)` and
`run(args, command)`. Every bench records the command as typed (`command`) and the commit
(`commit`) in its JSON. Every bench but real-model gets --work-dir and --out here: the JSON goes
to --out, else into the work dir (--work-dir, else ./runs/bench/<benchmark>-<time>); temporary
files (TMPDIR, checkpoints, and with the default work dir the run directories) are removed when
the bench ends: llamarl_core/bench/work_dir.py.
"""
from __future__ import annotations

import importlib
import json
import os
import shlex
import sys

from rich.console import Console

from llamarl_cli.common import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, load_config, make_parser, parse,
                                print_resolved, run_guarded)

BENCHES = {  # name -> (module with parser(prog) and run(args, command), or None: a recipe bench below; one line)
    "sync-vs-async": (None, "a recipe run sync (k=0) and async (k>=1), alternating; --simulate: predicted"),
    "quality": (None, "held-out accuracy per RL sample: sync k=0 vs async k=1/k=4, three corrections"),
    "weight-sync": ("llamarl_core.bench.weight_sync_bench", "weight-sync GB/s per transport vs memcpy; --layout T:G: "
                                                            "DDMA rank layouts"),
    "generation": ("llamarl_core.bench.generation", "the engine vs transformers.generate (tiny presets), int8/fp8, "
                                                    "long tail"),
    "generation-real": ("llamarl_core.bench.generation_real", "the engine vs transformers.generate on a real "
                                                              "checkpoint; prefill once"),
    "launch": ("llamarl_core.bench.launch", "CPU and wall time of a 4-step train run, forked vs exec'd processes"),
    "real-model": ("llamarl_core.bench.real_model", "the real-model run as one JSON: watch its peak RSS, then "
                                                    "summarize it"),
    "slots": ("llamarl_core.bench.slots", "the streaming generator's tokens/s by slot count"),
    "streaming": ("llamarl_core.bench.streaming", "streaming vs chunked rollouts on one generator replica, long tail"),
    "trainer": ("llamarl_core.bench.trainer", "the RL trainer step at the default shapes: padded, sorted, skipping"),
    "env-busy": ("llamarl_core.bench.env_busy", "the generator's busy share while episodes wait on a slow tool "
                                                "vs a tool-free run"),
    "agent": ("llamarl_core.bench.agent", "a real model learns its calc tool (agent_calc_cpu): base eval, warm start, "
                                          "RL; held-out accuracy and tool calls"),
    "lora-apply": ("llamarl_core.bench.lora_apply", "LoRA on the generator: merged after each sync vs unmerged "
                                                    "projections; break-even"),
    "lora-trainer": ("llamarl_core.bench.lora_trainer", "trainer busy s/step and peak memory, full fine-tuning "
                                                        "vs LoRA"),
    "lora": ("llamarl_core.bench.lora_side_by_side", "smollm2_cpu vs smollm2_lora_cpu, same time: accuracy, "
                                                     "trainer cost, sync bytes"),
    "losses": ("llamarl_core.bench.losses", "the loss options (AIPO, GRPO, Dr.GRPO, GSPO, TIS/MIS at k=4) from one warm "
                                            "start, same wall time: held-out gain per arm"),
}
USAGE = ("usage: llamarl bench NAME [options] (NAME --help for its options)\n\n"
         + "\n".join(f"  {name:<16} {line}" for name, (_, line) in BENCHES.items()))


def main(argv) -> int:
    argv = list(argv)
    if not argv:
        print(USAGE, file=sys.stderr)
        return EXIT_USAGE
    if argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        raise SystemExit(EXIT_OK)  # as argparse's --help does, here and in every bench's own parser
    name, rest = argv[0], argv[1:]
    if name not in BENCHES:
        print(f"llamarl bench: unknown benchmark {name!r} (one of: {', '.join(BENCHES)})", file=sys.stderr)
        return EXIT_USAGE
    command = " ".join(["llamarl", "bench", *map(shlex.quote, argv)])
    return run_guarded(lambda: _run(name, rest, command))


def parser(name: str):
    """The argument parser of bench `name` (what its --help shows)."""
    module = BENCHES[name][0]
    if module is None:
        return _RECIPE_PARSERS[name]()
    mod = importlib.import_module(module)
    p = mod.parser(f"llamarl bench {name}")
    return _file_options(p) if getattr(mod, "WORK_DIR", True) else p


def _file_options(p):
    p.add_argument("--work-dir", default=None,
                   help="where the runs and the JSON go, kept with each run's logs and metrics "
                        "(default: ./runs/bench/<benchmark>-<time>, keeping only the JSON and PNGs)")
    p.add_argument("--out", default=None, help="JSON path (PNGs go beside it; default: in the work dir)")
    return p


def _run(name: str, argv: list[str], command: str) -> int:
    module = BENCHES[name][0]
    if module is None:
        args, recipe, overrides = parse(parser(name), argv)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        return _RECIPE_RUNS[name](args, recipe, overrides, command)
    mod = importlib.import_module(module)
    args = parser(name).parse_args(argv)
    if not getattr(mod, "WORK_DIR", True):
        return mod.run(args, command)

    def run() -> int:
        code = mod.run(args, command)
        if code == EXIT_OK:
            print(f"wrote {args.out}")
        return code
    return _in_work_dir(args, name.replace("-", "_"), run)


def _in_work_dir(args, benchmark: str, run) -> int:
    """Run one bench in its work dir (bench/work_dir.py): `args.work_dir` becomes that dir and
    `args.out` its JSON path; temporary files are removed however the bench ends."""
    from llamarl_core.bench.work_dir import BenchWorkDir

    with BenchWorkDir(getattr(args, "work_dir", None), benchmark) as wd:
        print(f"llamarl bench: work dir {wd.path}", flush=True)
        args.work_dir, args.out = wd.path, os.path.abspath(wd.json_path(args.out))
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        code = run()
        wd.failed = code != EXIT_OK
    return code


def _recipe_parser(name: str):
    return _file_options(make_parser(f"bench {name}", BENCHES[name][1]))


def _sync_vs_async_parser():
    p = _recipe_parser("sync-vs-async")
    p.add_argument("--simulate", action="store_true", help="the scale simulator (on a CPU recipe: predicted "
                                                           "beside measured)")
    p.add_argument("--steps", type=int, default=8, help="RL steps per run (default 8)")
    p.add_argument("--repeats", type=int, default=2, help="sync/async pairs (default 2)")
    p.add_argument("--target-accuracy", type=float, default=0.5,
                   help="report wall seconds to the first eval at or above this (default 0.5)")
    p.add_argument("--measured", default=None, metavar="FILE",
                   help="--simulate on a CPU recipe: reuse this measured sync-vs-async JSON (its run "
                        "directories must still exist) instead of running the measured bench")
    return p


def _quality_parser():
    from llamarl_core.bench.quality import DEFAULT_STEPS

    p = _recipe_parser("quality")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help=f"RL steps per run (default {DEFAULT_STEPS})")
    p.add_argument("--seeds", type=int, default=3, help="seeds per configuration (default 3)")
    p.add_argument("--configs", default=None, metavar="A,B",
                   help="run only these configurations (comma-separated; default all)")
    return p


def _write(out: str, result: dict, console: Console, command: str | None = None) -> None:
    """Write `result` to `out` as JSON, with its `commit` (and `command`, where given) recorded."""
    from llamarl_core.bench.provenance import git_commit

    if command is not None:
        result["command"] = command
    result.setdefault("commit", git_commit())
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    console.print(f"wrote {out}", soft_wrap=True, highlight=False)  # a path to copy: never wrapped


def _check_counts(steps: int, other: int, other_name: str) -> None:
    if steps < 1 or other < 1:
        raise UsageError(f"llamarl bench: --steps={steps} and --{other_name}={other} must be >= 1")


def _sync_vs_async(args, recipe, overrides, command: str) -> int:
    from llamarl_core.bench.report import sync_vs_async_table
    from llamarl_core.bench.sync_vs_async import run_sync_vs_async

    _check_counts(args.steps, args.repeats, "repeats")
    if args.simulate:
        return _simulate_either(args, recipe, overrides, command)
    return _in_work_dir(args, "sync_vs_async", lambda: _run_measured(
        lambda **kw: run_sync_vs_async(recipe, overrides, steps=args.steps, repeats=args.repeats,
                                       target_accuracy=args.target_accuracy, **kw),
        sync_vs_async_table, _sync_vs_async_plots, args, command))


def _run_measured(run, table, draw, args, command: str) -> int:
    """Run a measured bench (`run(work_dir=, log=, command=)`), print its table, write its
    JSON and pictures; a run that failed is one line on stderr and exit 1."""
    from llamarl_core.bench.sync_vs_async import BenchRunFailed

    console = Console()
    try:
        result = run(work_dir=args.work_dir, log=console.print, command=command)
    except BenchRunFailed as e:
        print(f"llamarl bench: {e}", file=sys.stderr)
        return EXIT_FAILED
    console.print(table(result))
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


def _quality(args, recipe, overrides, command: str) -> int:
    from llamarl_core.bench.quality import run_quality, select_configs
    from llamarl_core.bench.report import quality_table

    _check_counts(args.steps, args.seeds, "seeds")
    names = args.configs.split(",") if args.configs else None
    try:
        select_configs(names)
    except ValueError as e:
        raise UsageError(f"llamarl bench: {e}") from None
    return _in_work_dir(args, "quality", lambda: _run_measured(
        lambda **kw: run_quality(recipe, overrides, seeds=args.seeds, steps=args.steps, configs=names, **kw),
        quality_table, _quality_plots, args, command))


def _simulate_either(args, recipe, overrides, command: str) -> int:
    """A CPU recipe: predicted beside measured; any other (or none): the scale simulator."""
    recipe_given = any(w.startswith("recipe=") for w in args.words)
    cfg = load_config(recipe, overrides) if recipe_given else None
    if cfg is not None and cfg.resources.device == "cpu":
        if args.measured and not os.path.exists(args.measured):
            raise UsageError(f"llamarl bench: --measured {args.measured}: no such file")
        return _in_work_dir(args, "sync_vs_async_simulated",
                            lambda: _simulate_cpu(cfg, recipe, overrides, args, command))
    return _in_work_dir(args, "simulator", lambda: _simulate(cfg, args.out, command))


def _simulate(cfg, out, command: str) -> int:
    from llamarl_core.bench.report import simulate_recipe

    console = Console()
    result = simulate_recipe(cfg, console)
    _write(out, result, console, command)
    return EXIT_OK


def _simulate_cpu(cfg, recipe, overrides, args, command: str) -> int:
    """Predicted (sim/cpu.py, this CPU's constants) beside measured (the sync-vs-async bench)."""
    from llamarl_core.bench.report import predicted_vs_measured_table
    from llamarl_core.bench.sim_cpu import simulate_cpu_recipe
    from llamarl_core.bench.sync_vs_async import BenchRunFailed, run_sync_vs_async

    console = Console()

    def run_measured(log, between_runs):
        return run_sync_vs_async(recipe, overrides, steps=args.steps, repeats=args.repeats,
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


_RECIPE_PARSERS = {"sync-vs-async": _sync_vs_async_parser, "quality": _quality_parser}
_RECIPE_RUNS = {"sync-vs-async": _sync_vs_async, "quality": _quality}
