"""docs/CONFIG.md, generated from the config schema (llamarl_core/config/doc.py says how).

    python scripts/config_doc.py            # rewrite docs/CONFIG.md
    python scripts/config_doc.py --check    # exit 1, printing a diff, if docs/CONFIG.md differs

A schema field without a comment stops both with one line naming file, line and key (exit 2).
"""
from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from llamarl_core.config.doc import UndocumentedField, page_path, render
from llamarl_core.config.schema import LlamaRLConfig

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/CONFIG.md is not what would be generated")
    args = parser.parse_args(argv)
    try:
        text = render(LlamaRLConfig)
    except UndocumentedField as e:
        print(f"config_doc: {e}", file=sys.stderr)
        return 2
    path = page_path(root)
    if args.check:
        old = path.read_text() if path.is_file() else ""
        if old == text:
            return 0
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                                   str(path), "generated"))
        print(f"{path} is stale: run python scripts/config_doc.py", file=sys.stderr)
        return 1
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
