"""The heartbeat carries the main loop's last progress, not the clock: a hung loop goes
stale in the store even though the heartbeat thread lives on."""
import time

import torch.distributed as dist

from llamarl_core.runtime.worker import Heartbeat
from llamarl_core.transport.control import ControlPlane, serve_run


def test_the_heartbeat_reports_when_the_main_loop_last_made_progress():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    run = serve_run(server, "r1")  # the run's keys, as the controller serves them
    beat = Heartbeat("127.0.0.1", server.port, "trainer", 0, interval_s=0.02, timeout_s=5, run_id="r1")
    beat.progress_s = lambda: 1234.5  # the loop last moved at t = 1234.5 and hangs since
    beat.start()
    try:
        time.sleep(0.2)
        assert ControlPlane(run).last_heartbeat("trainer", 0) == 1234.5
    finally:
        beat.stopped.set()
