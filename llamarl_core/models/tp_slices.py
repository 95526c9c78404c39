"""Which slice of each full parameter a generator tensor-parallel rank holds. Pure arithmetic
(no torch), so the simulator can count the bytes a weight sync moves (sim/ddma_bytes.py) with the
same rule the transport uses (transport/tp_layout.py takes the slices as tensor views).

Megatron-style split of a Llama block (the layout `tensor_parallel.shard_model_` builds):

    column-parallel (dim 0, output rows):  attention.wq / wk / wv, feed_forward.w1 / w3
                                           (and Qwen2's wq / wk / wv biases, with their rows)
    row-parallel    (dim 1, input cols):   attention.wo, feed_forward.w2
    replicated:                            embeddings, norms, output head, Qwen3's per-head
                                           q_norm / k_norm (each [head_dim], used by every head)

wq rows are split by whole heads: rank r holds query heads [r·H/tp, (r+1)·H/tp). wk/wv rows
are split by whole KV heads when tp divides n_kv_heads; when tp is a multiple of n_kv_heads
(e.g. 8 KV heads at tp=16) each KV head is replicated on the tp/KV ranks whose query heads
use it, so rank r holds KV head r // (tp / KV). wo's columns follow wq's rows.

The contract `tp_slice(name, ...) -> TPSlice(dim, start, stop)` covers every parameter
(replicated ones as the full dim-0 range), so the weight sync (which bytes rank r needs,
`transport/ddma_plan.build_plan`), the generator's own sharding (`tensor_parallel`) and the
checksums (the sha256 of the slice a rank holds) use one definition: there is no other.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from llamarl_core.models.args import ModelArgs

COLUMN_PARALLEL = ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1", "feed_forward.w3")
ROW_PARALLEL = ("attention.wo", "feed_forward.w2")


def is_block_linear(name: str) -> bool:
    """A transformer block's linear weight (the ones TP splits and the engine quantizes; the
    embedding and output head are not): fp8 on the weight-sync wire carries exactly these."""
    module = name.rsplit(".", 1)[0]
    return (name.endswith(".weight") and module.startswith("layers.")
            and module.endswith(COLUMN_PARALLEL + ROW_PARALLEL))


class TPSlice(NamedTuple):
    dim: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def check_tp(args: ModelArgs, tp_size: int, key: str = "tp") -> None:
    """The one tensor-parallel divisibility rule: the plan calls it naming the config key
    (plan/validate.py, exit 2 before launch); the sharding code calls it as a guard for
    direct callers. `key` names the size in the message."""
    if tp_size < 1 or args.n_heads % tp_size:
        raise ValueError(f"{key}={tp_size} does not divide the model's {args.n_heads} attention heads")
    if args.n_kv_heads % tp_size and tp_size % args.n_kv_heads:
        raise ValueError(f"{key}={tp_size} does not divide the model's {args.n_kv_heads} KV heads "
                         f"(nor is it a multiple of them)")
    if args.ffn_dim % tp_size:
        raise ValueError(f"{key}={tp_size} does not divide the model's ffn_dim={args.ffn_dim}")


def _kind(name: str) -> str:
    module = name.rsplit(".", 1)[0]  # "layers.3.attention.wq"
    if not module.startswith("layers."):
        return "replicated"
    if module.endswith(COLUMN_PARALLEL):
        return "column"
    if module.endswith(ROW_PARALLEL):
        return "row"
    return "replicated"


def tp_slice(name: str, shape: tuple[int, ...], args: ModelArgs, tp_rank: int, tp_size: int) -> TPSlice:
    """The slice of full parameter `name` (of `shape`) that TP rank `tp_rank` of `tp_size` holds."""
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank={tp_rank} is not in [0, {tp_size})")
    check_tp(args, tp_size)
    kind = _kind(name)
    if kind == "replicated" or tp_size == 1:
        return TPSlice(0, 0, shape[0])
    dim = 0 if kind == "column" else 1
    if name.endswith(("attention.wk.weight", "attention.wv.weight", "attention.wk.bias",
                      "attention.wv.bias")) and tp_size > args.n_kv_heads:
        head = tp_rank // (tp_size // args.n_kv_heads)  # replicated KV head this rank's queries use
        return TPSlice(0, head * args.head_dim, (head + 1) * args.head_dim)
    if shape[dim] % tp_size:
        raise ValueError(f"generator tp={tp_size} does not divide dim {dim} of '{name}' {tuple(shape)}")
    size = shape[dim] // tp_size
    return TPSlice(dim, tp_rank * size, (tp_rank + 1) * size)


def fsdp_rows(dim0: int, world: int, rank: int) -> tuple[int, int]:
    """Rows of dim 0 FSDP2 gives ``rank`` of ``world`` (``torch.chunk``: ceil-sized, tail may be empty).
    The DDMA plan (transport/ddma_plan.py) reads each trainer rank's shard with this rule."""
    per = math.ceil(dim0 / world) if dim0 else 0
    return min(rank * per, dim0), min((rank + 1) * per, dim0)


def serving_replica(generator: int, tp_size: int, trainer_replicas: int) -> int:
    """The trainer replica (of an HSDP trainer's `trainer_replicas` identical copies) whose shards
    send generator rank ``generator`` its weights: (its replica + its TP rank) mod the replicas,
    so consecutive TP ranks of a generator replica alternate copies and the pattern shifts by one
    per generator replica. The DDMA plan (transport/ddma_plan.py) and the simulator's byte count
    both use it. Choosing by ``generator % trainer_replicas`` aliased with the TP rank whenever
    tp_size was a multiple of the replicas: a dim-0 slice's rows then always came from one copy,
    so half the trainer ranks sent 1.55x the bytes of the busiest generator's receive (405B:
    2 x 256 HSDP to 64 x TP 8) and the others a third of it."""
    return (generator // tp_size + generator % tp_size) % trainer_replicas
