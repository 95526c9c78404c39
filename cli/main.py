"""`llamarl` console entry point (verbs are added as the toolkit grows)."""
import sys


def main(argv=None) -> int:
    print("llamarl: under construction", file=sys.stderr)
    return 1
