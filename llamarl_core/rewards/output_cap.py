"""A reward worker's output, copied to the reward rank's log with a cap (#44: one reward
printing in a loop wrote 2.2 GB of logs). The worker's fd 1 and 2 are one pipe, so the cap
holds for Python prints, C code and any subprocess the reward starts."""
from __future__ import annotations

import codecs
import sys

MAX_OUTPUT_BYTES = 1024**2  # what one worker process may print (stdout + stderr) to the log


def copy_capped(pipe, label: str, cap_bytes: int = MAX_OUTPUT_BYTES) -> None:
    """Copy a worker's output to this process's stdout until ``cap_bytes``, then say so once
    and drop the rest (still read, so the worker never blocks on a full pipe). The pipe holds
    everything the worker's process tree writes to fd 1/2, C code and subprocesses included.
    `label` names the worker in the log ("reward worker 0", "env worker 1")."""
    written, decoder = 0, codecs.getincrementaldecoder("utf-8")("replace")  # a character may span reads
    with pipe:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            if written >= cap_bytes:
                continue
            part = chunk[:cap_bytes - written]
            written += len(part)
            try:
                sys.stdout.write(decoder.decode(part))
                if written >= cap_bytes:
                    sys.stdout.write(f"\n{label}: output over {cap_bytes / 1024**2:g} MiB, "
                                     f"the rest dropped\n")
                sys.stdout.flush()
            except (OSError, ValueError):  # this process's stdout is closed: keep draining
                pass
