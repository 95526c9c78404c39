"""`llamarl` console entry point: one small command per verb."""
from __future__ import annotations

import sys

VERBS = {
    "plan": ("llamarl_cli.plan_cmd", "resolve a recipe into a launch plan (roles, ranks, memory, commands)"),
    "train": ("llamarl_cli.train_cmd", "run RL training: one torchrun group per role under one controller"),
    "node": ("llamarl_cli.node_cmd", "run node K's share of a plan.json (`plan --out`); node 0 hosts the controller"),
    "eval": ("llamarl_cli.eval_cmd", "evaluate a checkpoint (accuracy, pass@k, maj@k)"),
    "export": ("llamarl_cli.export_cmd", "write a run's checkpoints/step_<N> as a Hugging Face directory (export.dtype)"),
    "data": ("llamarl_cli.data_cmd", "show the rendered prompts, token counts and reference rewards (no model)"),
    "bench": ("llamarl_cli.bench_cmd", "benchmarks, one per results-table row: `bench NAME` (`bench` lists them)"),
    "report": ("llamarl_cli.report_cmd", "plots and a markdown summary of run directories"),
    "models": ("llamarl_cli.models_cmd", "get a known pretrained model as a checked HF directory (`models list`)"),
}

USAGE = "usage: llamarl {" + ",".join(VERBS) + "} [recipe=NAME|recipe=path.yaml] [key=value ...] [--help]\n\n" + \
    "\n".join(f"  {v:<6} {h}" for v, (_, h) in VERBS.items())


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"llamarl: error: unknown verb {verb!r}\n{USAGE}", file=sys.stderr)
        return 2
    import importlib
    return importlib.import_module(VERBS[verb][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
