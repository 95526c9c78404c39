"""An environment worker's process:
``python -m llamarl_core.envs.worker_entry FD SPEC_JSON PARENT_IS_MAIN_THREAD``.

Kept apart from ``worker.py`` so that running it with ``-m`` does not re-import a module
the package has already imported.
"""
import json
import sys
from multiprocessing.connection import Connection

from llamarl_core.envs.worker import worker_main

if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])), json.loads(sys.argv[2]), sys.argv[3] == "1")
