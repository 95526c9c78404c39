"""A rollout chunk: what a generator replica produced for one trainer step, as tensors.

Rows are whole prompt groups, `group_size` consecutive rows per prompt. `tokens` holds each
row's prompt followed by its completion, right-padded; the trainer recomputes log π on
exactly these tokens. Packing to three tensors (header, ints, floats) is how it crosses
torch.distributed.

A generator sends each prompt group as soon as its last sample ends (continuous batching):
such a part carries `group` (its first group's index in the chunk) and `chunk_groups` (groups
in the whole chunk; 0 = this rollout is the whole chunk); the reward role receives a chunk's
groups straight into one packed buffer (wire/assembly.py).
`policy_versions[r]` is the oldest policy version row r was decoded under (weights may be
swapped between decode steps); `policy_version` is the oldest over all rows.

One layout on the wire: a received rollout's fields are views into its two packed tensors
(`packed`), and what is made from it by `rows` and `concat` stays packed, so a reward rank
scores in place and forwards rows without packing them again (`pack` copies only a rollout
whose fields are not views of its packed tensors, i.e. once, on the generator).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import torch

TENSOR_FIELDS = ("tokens", "prompt_lens", "completion_lens", "behavior_logprobs", "rewards", "example_ids",
                 "policy_versions")
# [num_rows, row_len, completion_len, policy_version, replica, chunk, group, chunk_groups]
HEADER_LEN = 8


@dataclass
class Rollout:
    tokens: torch.Tensor             # [N, L] int64 prompt + completion, right-padded
    prompt_lens: torch.Tensor        # [N] int64
    completion_lens: torch.Tensor    # [N] int64
    behavior_logprobs: torch.Tensor  # [N, C] float32 log μ of each completion token
    rewards: torch.Tensor            # [N] float32 (0 until scored)
    example_ids: torch.Tensor        # [N] int64 index into the train examples (group id)
    policy_version: int
    replica: int
    chunk: int
    policy_versions: Optional[torch.Tensor] = None  # [N] int64; None: every row at policy_version
    group: int = 0
    chunk_groups: int = 0
    packed: Optional[tuple[torch.Tensor, torch.Tensor]] = dataclasses.field(default=None, repr=False,
                                                                            compare=False)

    def __post_init__(self):
        if self.policy_versions is None:
            self.policy_versions = torch.full((self.num_rows,), self.policy_version, dtype=torch.long)

    @property
    def num_rows(self) -> int:
        return int(self.tokens.shape[0])

    def header(self) -> torch.Tensor:
        return torch.tensor([self.num_rows, self.tokens.shape[1], self.behavior_logprobs.shape[1],
                             self.policy_version, self.replica, self.chunk, self.group,
                             self.chunk_groups], dtype=torch.int64)

    def pack(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._is_packed():
            return self.header(), *self.packed
        return (self.header(), *_pack(self))

    def _is_packed(self) -> bool:
        """Whether every field is still a view of `packed` (a field replaced since is not)."""
        if self.packed is None:
            return False
        ints, floats = self.packed
        same = lambda t, buf: t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()  # noqa: E731
        return (all(same(getattr(self, f), ints) for f in ("tokens", "prompt_lens", "completion_lens",
                                                          "example_ids", "policy_versions"))
                and same(self.behavior_logprobs, floats) and same(self.rewards, floats)
                and ints.is_contiguous() and floats.is_contiguous() and ints.shape[0] == self.num_rows)

    @staticmethod
    def empty_buffers(header: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, length, c = (int(x) for x in header[:3])
        return torch.empty(n, length + 4, dtype=torch.int64), torch.empty(n, c + 1, dtype=torch.float32)

    @staticmethod
    def unpack(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> "Rollout":
        """A received rollout: its fields are views of `ints` and `floats` (no copy)."""
        return Rollout._views(header, ints, floats)

    @staticmethod
    def _views(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> "Rollout":
        length = int(header[1])
        return Rollout(tokens=ints[:, :length], prompt_lens=ints[:, length],
                       completion_lens=ints[:, length + 1], example_ids=ints[:, length + 2],
                       behavior_logprobs=floats[:, :-1], rewards=floats[:, -1],
                       policy_version=int(header[3]), replica=int(header[4]), chunk=int(header[5]),
                       policy_versions=ints[:, length + 3], group=int(header[6]),
                       chunk_groups=int(header[7]), packed=(ints, floats))

    @staticmethod
    def _from_packed(ints: torch.Tensor, floats: torch.Tensor, length: int, replica: int, chunk: int) -> "Rollout":
        """A whole chunk (or rows of one) over packed tensors: its version is its rows' oldest."""
        versions = ints[:, length + 3]
        header = torch.tensor([ints.shape[0], length, floats.shape[1] - 1,
                               int(versions.min()) if versions.numel() else 0, replica, chunk, 0, 0])
        return Rollout._views(header, ints, floats)

    def to(self, device) -> "Rollout":
        """Every tensor field on `device` (a generator assembles tokens and log-probs on its GPU;
        the wire and the trainer's bookkeeping take host tensors)."""
        moved = {f: getattr(self, f).to(device) for f in TENSOR_FIELDS}
        return dataclasses.replace(self, **moved)

    def rows(self, start: int, stop: int) -> "Rollout":
        if self._is_packed():  # views of the packed rows: forwarded as they are
            ints, floats = self.packed
            return Rollout._from_packed(ints[start:stop], floats[start:stop], self.tokens.shape[1],
                                        self.replica, self.chunk)
        return Rollout(self.tokens[start:stop], self.prompt_lens[start:stop],
                       self.completion_lens[start:stop], self.behavior_logprobs[start:stop],
                       self.rewards[start:stop], self.example_ids[start:stop],
                       int(self.policy_versions[start:stop].min()), self.replica, self.chunk,
                       self.policy_versions[start:stop])

    def select(self, rows: torch.Tensor) -> "Rollout":
        """Rows `rows` (indices, possibly none) as one rollout; an empty one keeps the version."""
        versions = self.policy_versions[rows]
        return Rollout(self.tokens[rows], self.prompt_lens[rows], self.completion_lens[rows],
                       self.behavior_logprobs[rows], self.rewards[rows], self.example_ids[rows],
                       int(versions.min()) if versions.numel() else self.policy_version, self.replica,
                       self.chunk, versions)


def _pack(r: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy into the wire layout: ints [N, L + 4], floats [N, C + 1]."""
    ints = torch.cat([r.tokens, r.prompt_lens[:, None], r.completion_lens[:, None],
                      r.example_ids[:, None], r.policy_versions[:, None]], dim=1)  # [N, L + 4]
    floats = torch.cat([r.behavior_logprobs, r.rewards[:, None]], dim=1)  # [N, C + 1]
    return ints.contiguous(), floats.contiguous()


def concat(rollouts: list[Rollout]) -> Rollout:
    """Stack chunks (right-padding tokens and log-probs to the longest); packed ones of one width
    stay packed (one copy, no re-pack before they are sent on)."""
    if all(r._is_packed() for r in rollouts) and len({(r.packed[0].shape[1], r.packed[1].shape[1])
                                                       for r in rollouts}) == 1:
        first = rollouts[0]
        out = Rollout._from_packed(torch.cat([r.packed[0] for r in rollouts]),
                                   torch.cat([r.packed[1] for r in rollouts]), first.tokens.shape[1],
                                   first.replica, first.chunk)
        out.policy_version = min(r.policy_version for r in rollouts)
        return out
    length = max(r.tokens.shape[1] for r in rollouts)
    comp = max(r.behavior_logprobs.shape[1] for r in rollouts)
    pad = lambda t, n, v: torch.nn.functional.pad(t, (0, n - t.shape[1]), value=v)  # noqa: E731
    return Rollout(
        tokens=torch.cat([pad(r.tokens, length, 0) for r in rollouts]),
        prompt_lens=torch.cat([r.prompt_lens for r in rollouts]),
        completion_lens=torch.cat([r.completion_lens for r in rollouts]),
        behavior_logprobs=torch.cat([pad(r.behavior_logprobs, comp, 0.0) for r in rollouts]),
        rewards=torch.cat([r.rewards for r in rollouts]),
        example_ids=torch.cat([r.example_ids for r in rollouts]),
        policy_version=min(r.policy_version for r in rollouts),
        replica=rollouts[0].replica, chunk=rollouts[0].chunk,
        policy_versions=torch.cat([r.policy_versions for r in rollouts]))


def staleness_per_row(rollouts: list[Rollout], trainer_version: int) -> torch.Tensor:
    """Versions behind the trainer, per row: each row counts its oldest decoding version."""
    return torch.cat([(trainer_version - r.policy_versions).float() for r in rollouts])
