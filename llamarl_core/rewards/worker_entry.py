"""A reward worker's process:
``python -m llamarl_core.rewards.worker_entry FD REWARD PARENT_IS_MAIN_THREAD MAX_ABS``.

Kept apart from ``worker.py`` so that running it with ``-m`` does not re-import a module
the package has already imported.
"""
import sys
from multiprocessing.connection import Connection

from llamarl_core.rewards.worker import worker_main

if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])), sys.argv[2], sys.argv[3] == "1", float(sys.argv[4]))
