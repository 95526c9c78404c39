"""AsyncSender: idle() once every rollout was taken; healthy() ignores the queue but not a failure.

A streaming generator waits on healthy() (its previous groups need not be taken first); that
wait must still end with LinkBroken once a send failed, or the generator outlives its reward
rank's restart, waiting for weights forever."""
import threading
import time

import pytest
import torch

from llamarl_core.transport.channels import AsyncSender, LinkBroken
from llamarl_core.wire.rollout import Rollout


def make_rollout():
    tokens = torch.tensor([[5, 6, 7, 8, 9, 0]])
    return Rollout(tokens, torch.tensor([3]), torch.tensor([2]), torch.tensor([[-0.1, -0.2, 0.0]]),
                   torch.tensor([1.0]), torch.tensor([11]), 3, 1, 7)


class GatedLink:
    """Blocks each send until released; fails it when told to."""
    name = "gated"

    def __init__(self):
        self.release, self.fail, self.sent = threading.Event(), False, 0

    def send(self, tensor, tag):
        self.release.wait(10)
        if self.fail:
            raise ConnectionError("peer gone")
        self.sent += 1


def _until(pred, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not pred() and time.monotonic() < deadline:
        time.sleep(0.005)
    return pred()


def test_healthy_while_a_send_is_queued_idle_only_once_it_is_taken():
    link, sender = GatedLink(), AsyncSender()
    sender.send(make_rollout(), link, tag=1)
    assert sender.healthy() and not sender.idle()
    link.release.set()
    assert _until(sender.idle) and sender.healthy() and link.sent > 0


def test_healthy_raises_link_broken_once_a_send_failed():
    link, sender = GatedLink(), AsyncSender()
    link.fail = True
    sender.send(make_rollout(), link, tag=1)
    link.release.set()
    assert _until(lambda: sender.error is not None)
    with pytest.raises(LinkBroken, match="peer gone"):
        sender.healthy()
    with pytest.raises(LinkBroken):
        sender.idle()
