"""`llamarl report RUN_DIR [RUN_DIR ...] [--out DIR]`: PNGs and a markdown summary of runs.

Several run directories are overlaid in every picture (sync vs async, two seeds, a resumed
run beside the original). Works on a run that is still going.
"""
from __future__ import annotations

import os

from llamarl_cli.common import EXIT_OK, Parser, UsageError, run_guarded


def _parser():
    p = Parser(prog="llamarl report", description="Plots (accuracy and reward vs wall time and "
                "samples, a per-role Gantt of a window of steps, staleness and IS ratio, sync time) "
                "and report.md for one or more run directories, overlaid.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", default=None, help="output folder (default: RUN_DIR/report of the first)")
    p.add_argument("--gantt-steps", type=int, default=5, help="RL steps in the Gantt window (default 5)")
    return p


def main(argv) -> int:
    def run() -> int:
        args = _parser().parse_args(argv)
        from llamarl_core.report.plots import write_all
        from llamarl_core.report.run_data import load_run
        from llamarl_core.report.summary import markdown
        try:
            runs = [load_run(d) for d in args.run_dirs]
        except (FileNotFoundError, NotADirectoryError, ValueError) as e:  # not a run directory
            raise UsageError(f"llamarl report: {e}") from None
        out = args.out or os.path.join(args.run_dirs[0], "report")
        try:
            pngs = write_all(runs, out, args.gantt_steps)
        except ModuleNotFoundError as e:
            raise UsageError(f"llamarl report needs matplotlib ({e}): pip install 'llamarl[bench]'") from None
        path = os.path.join(out, "report.md")
        with open(path, "w") as f:
            f.write(markdown(runs, pngs, out))
        print(f"wrote {path} and {len(pngs)} pictures in {out}")
        return EXIT_OK

    return run_guarded(run)
