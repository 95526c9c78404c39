"""A rollout chunk: what a generator replica produced for one trainer step, as tensors.

Rows are whole prompt groups, `group_size` consecutive rows per prompt. `tokens` holds each
row's prompt followed by its completion, right-padded; the trainer recomputes log π on
exactly these tokens. `behavior_logprobs` and `loss_mask` are already in the loss's layout:
column t holds log μ of token t+1 (a next-token target) and whether that token is the model's,
so the trainer slices rows of them and never re-aligns them (executors/train_step.py). A
multi-turn episode's completion holds the model's tokens exactly as sampled and the
environment's tokens between its turns (envs/episode.py): those are masked out (0 in
`loss_mask`, log μ 0). The fields are listed once, in `INT_FIELDS` and
`FLOAT_FIELDS`: the packed tensors' columns, in order. Packing to three tensors (header, ints,
floats) is how a rollout crosses torch.distributed.

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

# Every per-row field, in its packed tensor's column order: the wide ones (`WIDE_FIELDS`) are
# [N, width] each (tokens L wide, the float ones L - 1, from the header), the others one column
# each. ints [N, L + 10], floats [N, 2 (L - 1) + 1]. The episode counts (turns, tool_calls,
# tool_errors, truncated, failed, env_ms) are 1, 0, 0, 0, 0, 0 for a single-turn row.
INT_FIELDS = ("tokens", "prompt_lens", "completion_lens", "example_ids", "policy_versions",
              "turns", "tool_calls", "tool_errors", "truncated", "failed", "env_ms")
FLOAT_FIELDS = ("behavior_logprobs", "loss_mask", "rewards")
WIDE_FIELDS = ("tokens", "behavior_logprobs", "loss_mask")
EPISODE_FIELDS = ("turns", "tool_calls", "tool_errors", "truncated", "failed", "env_ms")
TENSOR_FIELDS = INT_FIELDS + FLOAT_FIELDS
# [num_rows, row_len, completion_len, policy_version, replica, chunk, group, chunk_groups]
HEADER_LEN = 8


@dataclass
class Rollout:
    tokens: torch.Tensor             # [N, L] int64 prompt + completion, right-padded
    prompt_lens: torch.Tensor        # [N] int64
    completion_lens: torch.Tensor    # [N] int64 every token after the prompt (model and environment)
    behavior_logprobs: torch.Tensor  # [N, L-1] float32 log μ of token t+1 at column t, 0 off model tokens
    rewards: torch.Tensor            # [N] float32 (NaN until scored: the reward role scores those rows)
    example_ids: torch.Tensor        # [N] int64 index into the train examples (group id)
    policy_version: int
    replica: int
    chunk: int
    policy_versions: Optional[torch.Tensor] = None  # [N] int64; None: every row at policy_version
    # [N, L-1] float32 1 at column t when token t+1 is the model's (a loss target), 0 at the prompt,
    # environment tokens and padding; None: the whole completion (a single-turn row)
    loss_mask: Optional[torch.Tensor] = None
    turns: Optional[torch.Tensor] = None        # [N] int64 assistant turns (None: 1 each)
    tool_calls: Optional[torch.Tensor] = None   # [N] int64 tool calls the model made (None: 0)
    tool_errors: Optional[torch.Tensor] = None  # [N] int64 malformed or failed ones (None: 0)
    truncated: Optional[torch.Tensor] = None    # [N] int64 1: cut by env.max_turns / max_episode_tokens / a turn's cap
    failed: Optional[torch.Tensor] = None       # [N] int64 1: its environment raised, timed out or died (not trained)
    env_ms: Optional[torch.Tensor] = None       # [N] int64 milliseconds its environment steps took
    group: int = 0
    chunk_groups: int = 0
    packed: Optional[tuple[torch.Tensor, torch.Tensor]] = dataclasses.field(default=None, repr=False,
                                                                            compare=False)

    def __post_init__(self):
        if self.policy_versions is None:
            self.policy_versions = torch.full((self.num_rows,), self.policy_version, dtype=torch.long)
        if self.loss_mask is None:
            self.loss_mask = completion_mask(self.prompt_lens, self.completion_lens,
                                             self.behavior_logprobs.shape[1] + 1).float()
        for name in EPISODE_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, torch.full((self.num_rows,), int(name == "turns"), dtype=torch.long))

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
        return (all(same(getattr(self, f), ints) for f in INT_FIELDS)
                and all(same(getattr(self, f), floats) for f in FLOAT_FIELDS)
                and ints.is_contiguous() and floats.is_contiguous() and ints.shape[0] == self.num_rows)

    @staticmethod
    def empty_buffers(header: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, (ints, floats) = int(header[0]), Rollout.packed_widths(header)
        return torch.empty(n, ints, dtype=torch.int64), torch.empty(n, floats, dtype=torch.float32)

    @staticmethod
    def packed_widths(header: torch.Tensor) -> tuple[int, int]:
        """Columns of the packed ints and floats of a rollout with `header`."""
        return (int(header[1]) + len(INT_FIELDS) - 1,
                int(header[2]) * (len(WIDE_FIELDS) - 1) + len(FLOAT_FIELDS) - len(WIDE_FIELDS) + 1)

    @staticmethod
    def unpack(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> "Rollout":
        """A received rollout: its fields are views of `ints` and `floats` (no copy)."""
        return Rollout.over_packed(header, ints, floats)

    @staticmethod
    def over_packed(header: torch.Tensor, ints: torch.Tensor, floats: torch.Tensor) -> "Rollout":
        """The rollout whose fields are views of packed `ints` and `floats` (what `header` says)."""
        fields = {**columns(ints, int(header[1]), INT_FIELDS), **columns(floats, int(header[2]), FLOAT_FIELDS)}
        return Rollout(**fields, policy_version=int(header[3]), replica=int(header[4]), chunk=int(header[5]),
                       group=int(header[6]), chunk_groups=int(header[7]),
                       packed=(ints, floats))

    @staticmethod
    def _from_packed(ints: torch.Tensor, floats: torch.Tensor, length: int, replica: int, chunk: int) -> "Rollout":
        """A whole chunk (or rows of one) over packed tensors: its version is its rows' oldest."""
        versions = ints[:, length + INT_FIELDS.index("policy_versions") - 1]
        wide = [f for f in FLOAT_FIELDS if f in WIDE_FIELDS]
        header = torch.tensor([ints.shape[0], length, (floats.shape[1] - len(FLOAT_FIELDS) + len(wide)) // len(wide),
                               int(versions.min()) if versions.numel() else 0, replica, chunk, 0, 0])
        return Rollout.over_packed(header, ints, floats)

    def last_turn(self, r: int) -> tuple[int, int]:
        """Row r's last model turn as token positions [start, end): what a reward reads (a
        single-turn row's whole completion; an episode's last assistant turn, from its mask)."""
        targets = self.loss_mask[r].nonzero().squeeze(1)                         # [t] columns
        if not targets.numel():
            p = int(self.prompt_lens[r])
            return p, p
        end = int(targets[-1])
        gaps = (targets[1:] - targets[:-1] > 1).nonzero().squeeze(1)              # breaks between turns
        start = int(targets[int(gaps[-1]) + 1]) if gaps.numel() else int(targets[0])
        return start + 1, end + 2  # column t is token t+1's

    def to(self, device) -> "Rollout":
        """Packed, on `device` (a generator assembles its rows on its GPU; the wire and the trainer's
        bookkeeping take host tensors): one copy of each packed tensor, none on the same device."""
        header, ints, floats = self.pack()  # packed already on the default path (executors/chunks.py)
        return Rollout.over_packed(header, ints.to(device), floats.to(device))

    def rows(self, start: int, stop: int) -> "Rollout":
        if self._is_packed():  # views of the packed rows: forwarded as they are
            ints, floats = self.packed
            return Rollout._from_packed(ints[start:stop], floats[start:stop], self.tokens.shape[1],
                                        self.replica, self.chunk)
        return self.select(slice(start, stop))

    def select(self, rows) -> "Rollout":
        """Rows `rows` (indices, possibly none, or a slice) as one rollout; an empty one keeps the version."""
        versions = self.policy_versions[rows]
        return Rollout(**{f: getattr(self, f)[rows] for f in TENSOR_FIELDS},
                       policy_version=int(versions.min()) if versions.numel() else self.policy_version,
                       replica=self.replica, chunk=self.chunk)


def columns(buf: torch.Tensor, width: int, fields: tuple[str, ...]) -> dict:
    """Views of `buf`'s columns: the wide fields (`WIDE_FIELDS`) `width` wide, in order, then the
    others one column each."""
    out, at = {}, 0
    for f in fields:
        n = width if f in WIDE_FIELDS else 1
        out[f] = buf[:, at:at + width] if f in WIDE_FIELDS else buf[:, at]
        at += n
    return out


def completion_mask(prompt_lens: torch.Tensor, completion_lens: torch.Tensor, width: int) -> torch.Tensor:
    """[n, width-1] bool: the target columns of each row's completion tokens (column t predicts
    token t+1, so row r's tokens p_r .. p_r + c_r - 1 are targets p_r - 1 .. p_r + c_r - 2): a
    single-turn row's loss mask, where every completion token is the model's."""
    k = torch.arange(width - 1)[None, :] - (prompt_lens[:, None] - 1)         # [n, w-1]
    return (k >= 0) & (k < completion_lens[:, None])


def _pack(r: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """The copy into the wire layout: ints [N, L + 10], floats [N, 2 (L - 1) + 1]."""
    ints, floats = ([getattr(r, f) if f in WIDE_FIELDS else getattr(r, f)[:, None] for f in fields]
                    for fields in (INT_FIELDS, FLOAT_FIELDS))
    return (torch.cat(ints, dim=1).contiguous(), torch.cat([f.float() for f in floats], dim=1).contiguous())


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

    def stacked(f: str) -> torch.Tensor:  # [N, longest] for a 2-D field (right-padded), [N] else
        parts = [getattr(r, f) for r in rollouts]
        if parts[0].dim() == 1:
            return torch.cat(parts)
        width = max(t.shape[1] for t in parts)
        return torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[1])) for t in parts])
    return Rollout(**{f: stacked(f) for f in TENSOR_FIELDS}, policy_version=min(r.policy_version for r in rollouts),
                   replica=rollouts[0].replica, chunk=rollouts[0].chunk)


def staleness_per_row(rollouts: list[Rollout], trainer_version: int) -> torch.Tensor:
    """Versions behind the trainer, per row: each row counts its oldest decoding version."""
    return torch.cat([(trainer_version - r.policy_versions).float() for r in rollouts])
