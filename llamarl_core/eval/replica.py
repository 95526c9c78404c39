"""One `llamarl eval` generator replica, started by torchrun (like `train`'s role groups):

    python -m llamarl_core.runtime.loopback_torchrun --nproc-per-node=N -m llamarl_core.eval.replica role=eval job=JOB.json

Each rank generates the batches b with b % N == RANK (`generate_predictions`) and writes
`rank<RANK>.json` beside the job file; the parent merges and scores them. The job is JSON
(settings + examples) written by `parallel.generate_on_replicas`, never a pickle.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from llamarl_core.data import Example


def main(argv: list[str] | None = None) -> None:
    words = dict(w.partition("=")[::2] for w in (sys.argv[1:] if argv is None else argv))
    job_path = Path(words["job"])
    job = json.loads(job_path.read_text())
    rank = int(os.environ.get("RANK", "0"))
    from llamarl_core.eval.parallel import _generate
    examples = [Example(**e) for e in job["examples"]]
    predictions = _generate(rank, job["spec"], examples, job["progress"] and rank == 0)
    (job_path.parent / f"rank{rank}.json").write_text(json.dumps(predictions))


if __name__ == "__main__":
    main()
