"""`llamarl plan`: what `train` would launch, checked before anything starts."""
from __future__ import annotations

import json

from llamarl_cli.common import EXIT_OK, load_config, make_parser, parse, print_resolved, run_guarded
from llamarl_core.plan.plan import make_plan


def main(argv) -> int:
    parser = make_parser("plan", "Resolve a recipe into a launch plan: per role its global ranks, "
                         "nodes, TP/DP/FSDP/PP, dtype, quantization, per-device memory against "
                         "capacity, and the exact torchrun command lines `train` execs.")
    parser.add_argument("--json", action="store_true", help="print one JSON object to stdout")

    def run() -> int:
        args, recipe, overrides = parse(parser, argv)
        if args.cfg:
            print_resolved(recipe, overrides)
            return EXIT_OK
        plan = make_plan(load_config(recipe, overrides), require_data=False)
        if args.json:
            print(json.dumps(plan.to_dict(), indent=2))
        else:
            from llamarl_cli.render import print_plan
            print_plan(plan)
        return EXIT_OK

    return run_guarded(run)
