"""Fakes of the seams in executors/ports.py, in one process: a ControlStore in a dict and a
WeightPublisher + WeightReceiver pair that copies parameters (tests/unit/test_pipeline_fakes.py,
test_streaming.py)."""
from types import SimpleNamespace

import torch


class FakeControl:
    """A ControlStore in a dict: what the generator writes and reads of the run."""

    def __init__(self):
        self.held, self.extras = [], {}

    def set_held(self, global_rank, version):
        self.held.append((global_rank, version))

    def extra(self, replica):
        return self.extras.get(replica, 0)

    def add_extra(self, replica, n=1):
        self.extras[replica] = self.extras.get(replica, 0) + n
        return self.extras[replica]


class LocalWeights:
    """A WeightPublisher (trainer side) and its WeightReceiver (generator side) in one object:
    `publish` stages a copy of the trainer's weights, `receive` copies them into the generator's
    parameters. `publish_at_look` delays a publish until the generator's n-th look (`ready()`),
    i.e. it lands while a chunk is being decoded."""

    def __init__(self, source: torch.nn.Module, target: torch.nn.Module):
        self.source, self.target = source, target
        self.staged, self.published, self.looks, self.later = None, [], 0, None
        self.on_broken = None

    def publish(self, version):
        self.staged = (version, {n: p.detach().clone() for n, p in self.source.named_parameters()})
        self.published.append(version)
        return {"sync/version": version}

    def publish_at_look(self, n, version):
        self.later = (n, version)

    def ready(self):
        self.looks += 1
        if self.later and self.looks >= self.later[0]:
            self.publish(self.later[1])
            self.later = None
        return self.staged is not None

    def receive(self):
        version, state = self.staged
        self.staged = None
        with torch.no_grad():
            for n, p in self.target.named_parameters():
                p.copy_(state[n])
        return SimpleNamespace(version=version, seconds=0.0, gbps=0.0)

    def rejoin(self, version):
        return {}

    def close(self):
        pass
