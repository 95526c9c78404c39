"""Where `llamarl bench` puts its files, and what it removes when it ends.

    work dir   --work-dir DIR, else ./runs/bench/<benchmark>-<YYYYmmdd-HHMMSS> (never /tmp)
    JSON       --out FILE, else <work dir>/<benchmark>.json (the PNGs beside it)
    removed when the bench ends, success or failure:
      <work dir>/tmp   the TMPDIR of the bench and of every process it starts (torchrun's
                       torchelastic_* folders, compile caches)
      checkpoints      each run's checkpoints/ and the shared warmstart/ (the megabytes)
    removed too with the default work dir after a success: the run directories themselves;
      and the work dir itself when nothing is left in it (a bench refused before it ran)
    kept: the JSON, the PNGs, recipe_frozen.yaml; after a failure, the runs' logs (the error
      names them); with --work-dir, every run's logs, metrics.jsonl, timeline and summary.json
      (what `--simulate --measured FILE` reads again)

Only what this bench created is removed: entries of an explicit --work-dir that were there
before it started are left alone. Shared-memory segments are the controller's to sweep, per
run (runtime/controller.py).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

DEFAULT_ROOT = os.path.join("runs", "bench")
CHECKPOINT_DIRS = ("checkpoints", "warmstart")  # a run's checkpoints; the bench's shared warm start


def default_work_dir(benchmark: str, root: str = DEFAULT_ROOT) -> str:
    base = os.path.abspath(os.path.join(root, f"{benchmark}-{time.strftime('%Y%m%d-%H%M%S')}"))
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


class BenchWorkDir:
    """`with BenchWorkDir(args.work_dir, "sync_vs_async") as wd:` run into `wd.path`, write
    `wd.json_path(args.out)`; set `wd.failed = True` on a failed run (an exception counts too)."""

    def __init__(self, work_dir: str | None, benchmark: str):
        self.explicit = work_dir is not None
        self.path = os.path.abspath(work_dir) if work_dir else default_work_dir(benchmark)
        self.benchmark, self.failed = benchmark, False
        self.tmp = os.path.join(self.path, "tmp")
        self._before: set[str] = set()
        self._saved_env: str | None = None

    def json_path(self, out: str | None) -> str:
        return out or os.path.join(self.path, f"{self.benchmark}.json")

    def __enter__(self) -> "BenchWorkDir":
        os.makedirs(self.path, exist_ok=True)
        self._before = set(os.listdir(self.path))
        if "tmp" in self._before:  # someone's own folder: never ours to remove
            self.tmp = os.path.join(self.path, f"tmp-{os.getpid()}")
        os.makedirs(self.tmp, exist_ok=True)
        # Children inherit TMPDIR (the controller passes os.environ on): their temp files land
        # here, where the bench can find and remove them, instead of in the machine's /tmp.
        self._saved_env = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = tempfile.tempdir = self.tmp
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = self._saved_env
        tempfile.tempdir = None  # recomputed from the environment at next use
        self.clean(failed=self.failed or exc_type is not None)

    def clean(self, failed: bool) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        made = [os.path.join(self.path, e) for e in sorted(set(os.listdir(self.path)) - self._before)]
        for d in filter(os.path.isdir, made):
            if os.path.basename(d) in CHECKPOINT_DIRS:
                shutil.rmtree(d, ignore_errors=True)
            elif not self.explicit and not failed:
                shutil.rmtree(d, ignore_errors=True)  # a whole run directory
            else:
                shutil.rmtree(os.path.join(d, "checkpoints"), ignore_errors=True)
        if not self.explicit and not os.listdir(self.path):
            os.rmdir(self.path)  # a bench that stopped before writing anything leaves no folder
