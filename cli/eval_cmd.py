"""`llamarl eval` (placeholder until its issue lands)."""
from llamarl_cli.common import make_parser, parse, run_guarded


def main(argv) -> int:
    parser = make_parser("eval", "not implemented yet")

    def run() -> int:
        parse(parser, argv)
        raise SystemExit("llamarl eval: not implemented yet")

    return run_guarded(run)
