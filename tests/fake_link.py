"""A gloo link's receiving end, in-process: for tests that receive rollouts through the real
`transport/channels.recv_rollout_blocking` (into a reward rank's `ChunkAssembly`, say)."""
from llamarl_core.transport.channels import recv_rollout_blocking


class FakeLink:
    """Each `recv` copies the next sent tensor into the posted one (what gloo does)."""
    name = "fake"

    def __init__(self, messages):
        self.sent = [t for message in messages for t in message]

    def recv(self, tensor, tag):
        tensor.copy_(self.sent.pop(0))


def receive(assembly, sent):
    """`sent` (a Rollout) packed, sent and received into `assembly.buffers`, as the reward rank does."""
    return recv_rollout_blocking(FakeLink([sent.pack()]), 0, assembly.buffers)
