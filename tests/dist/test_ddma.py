"""DDMA weight sync on gloo: every generator rank ends each sync holding exactly its TP slice
of the trainer's full weights (sha256 per tensor), for T ∈ {1, 2} trainer ranks, generator
TP ∈ {1, 2}, fp32 and bf16, over shared memory and gloo point-to-point; and with fp8 on the
wire, exactly the engine's quantization (generation/quant.py) of that slice, q and scales.

One 4-process world runs every scenario (ranks 0..T-1 trainers, T..T+G-1 generators, the
rest idle); each scenario is its own membership epoch, so it also shows endpoints being
rebuilt from fresh `xfer/{epoch}` keys.

Last, ranks 0 and 1 build the endpoints as the roles do (executors/weights.py, collective
on gloo): they never use the role loop's store client (their receiving thread blocks in a
store, and a TCPStore client serialises its callers: on a GPU the generator loop would freeze
behind NCCL's lazy set-up), and both constructors finish a one-element warm-up per pair."""
import hashlib
import re
import sys
import threading

import pytest
import torch
import torch.distributed as dist

SHAPES = {  # odd first dims: a 2-way FSDP split is uneven (4+3, 5+5, 7+6)
    "tok_embeddings.weight": (10, 8), "layers.0.attention.wq.weight": (8, 8),
    "layers.0.attention.wo.weight": (8, 8), "layers.0.feed_forward.w1.weight": (12, 8),
    "layers.0.feed_forward.w2.weight": (8, 12), "layers.0.ffn_norm.weight": (7,), "norm.weight": (13,),
}
SCENARIOS = [(t, tp, dt, tr) for tr in ("shm", "collective") for dt in ("float32", "bfloat16")
             for t in (1, 2) for tp in (1, 2)]
# fp8 on the wire for the block matrices (the engine's quantized linears), generators in bf16
FP8_SCENARIOS = [(1, 1, "fp8", "collective"), (2, 2, "fp8", "collective"), (2, 1, "fp8", "shm")]
# one slot (resources.generator.weight_slots=1): the generator pauses while the trainers rewrite it
ONE_SLOT_SCENARIOS = [(2, 2, "float32", "shm", 1), (2, 2, "bfloat16", "collective", 1)]
FP8_NAMES = ("attention.wq.weight", "attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight")


def _args():  # the heads tp_slice checks tp=2 against: 2 query and 2 KV heads of dim 4, ffn_dim 12
    from llamarl_core.models import ModelArgs
    return ModelArgs(vocab_size=10, dim=8, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=12)


def _is_fp8(name: str) -> bool:
    return name.endswith(FP8_NAMES)
VERSIONS = (1, 2, 3)


def _full(version: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(version)
    return {n: torch.randn(s, generator=g) for n, s in SHAPES.items()}


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _expected(version: int, tp_rank: int, tp: int, dtype, fp8: bool = False) -> dict[str, str]:
    from llamarl_core.generation.quant import QuantizedLinear
    from llamarl_core.models.tp_slices import tp_slice
    from llamarl_core.transport.ddma_plan import scale_name
    out = {}
    for n, t in _full(version).items():
        sl = tp_slice(n, tuple(t.shape), _args(), tp_rank, tp)
        mine = t.narrow(sl.dim, sl.start, sl.size).to(dtype)
        if fp8 and _is_fp8(n):  # the engine's quantization of the whole slice it would hold
            quantized = QuantizedLinear(mine, "fp8")
            out[n], out[scale_name(n)] = _sha(quantized.q), _sha(quantized.scale)
        else:
            out[n] = _sha(mine)
    return out


def _scenario(rank, store, epoch, T, tp, dtype_name, transport, slots=2):
    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
    from llamarl_core.transport.ddma_plan import build_plan, fsdp_rows, scale_name
    fp8 = dtype_name == "fp8"
    dtype = torch.bfloat16 if fp8 else getattr(torch, dtype_name)
    G = tp  # one generator replica of TP size tp
    if rank >= T + G:
        return []
    plan = build_plan({n: (s, torch.float32) for n, s in SHAPES.items()}, trainer_ranks=T,
                      generator_ranks=G, tp_size=tp, args=_args(), dtype=dtype, fp8=_is_fp8 if fp8 else None, num_slots=slots)
    kw = dict(transport=transport, store=store, epoch=epoch, timeout_s=30, run_id=f"ddma-test-{epoch}")
    bad = []
    if rank < T:
        sender = DdmaSender(plan, rank, **kw)
        for v in VERSIONS:
            store.wait([f"e{epoch}/polled/{v}/{g}" for g in range(G)])  # each generator polled before this send
            local = {n: t[slice(*fsdp_rows(t.shape[0], T, rank))] for n, t in _full(v).items()}
            sender.send(local, v)
        sender.close()
        return bad
    g = rank - T
    params = {t.name: torch.nn.Parameter(torch.zeros(t.shape, dtype=plan.wire_dtype(t.name)), requires_grad=False)
              for t in plan.slots[g]}
    params |= {scale_name(t.name): torch.zeros(t.shape[0]) for t in plan.slots[g] if t.fp8}
    receiver = DdmaReceiver(plan, g, params, **kw)
    for v in VERSIONS:
        if receiver.poll() is not None:
            bad.append(f"v{v}: adopted before it was sent")
        store.set(f"e{epoch}/polled/{v}/{g}", "1")
        stats = receiver.receive()
        want = _expected(v, g % tp, tp, dtype, fp8)
        got = {n: _sha(p.detach()) for n, p in params.items()}
        bad += [f"v{v} {n}" for n in want if got[n] != want[n]]
        if stats.version != v:
            bad.append(f"adopted version {stats.version}, expected {v}")
        held = {p.untyped_storage().data_ptr() for p in params.values() if isinstance(p, torch.nn.Parameter)}
        if len(receiver.slots) != slots or held != {receiver.slots[(v - 1) % slots].untyped_storage().data_ptr()}:
            bad.append(f"v{v}: parameters are not views of slot {(v - 1) % slots} of {slots}")
    receiver.close()
    return bad


def _fsdp_rows_match(rank, store):
    """FSDP2's own dim-0 shard of a parameter is exactly the rows fsdp_rows names."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    from llamarl_core.transport.ddma_plan import fsdp_rows
    group = dist.new_group([0, 1])
    if rank > 1:
        return True
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 13), torch.nn.Linear(13, 7))
    full = {n: p.detach().clone() for n, p in model.named_parameters()}
    fully_shard(model, mesh=DeviceMesh.from_group(group, "cpu"))
    for n, p in model.named_parameters():
        lo, hi = fsdp_rows(full[n].shape[0], 2, rank)
        if not torch.equal(p.to_local(), full[n][lo:hi]):
            return False
    return True


def _body(rank, world_size, store):
    torch.manual_seed(0)
    results = {"fsdp_rows": _fsdp_rows_match(rank, store)}
    for epoch, case in enumerate(SCENARIOS + FP8_SCENARIOS + ONE_SLOT_SCENARIOS):
        results[case] = _scenario(rank, store, epoch, *case)
    results["endpoints"] = _endpoints(rank, store) if rank < 2 else None
    results["memory"] = _generator_memory(rank, store) if rank >= 2 else None
    return results


@pytest.fixture(scope="module")
def results(run_workers):
    return run_workers(_body, 4, timeout_s=240)


@pytest.mark.parametrize("case", SCENARIOS + FP8_SCENARIOS + ONE_SLOT_SCENARIOS,
                         ids=lambda c: f"T{c[0]}-tp{c[1]}-{c[2]}-{c[3]}" + (f"-{c[4]}slot" if len(c) > 4 else ""))
def test_every_generator_rank_holds_exactly_its_slice_after_every_sync(results, case):
    for rank, res in enumerate(results):
        assert res[case] == [], f"rank {rank}: {res[case]}"


def test_fsdp2_shards_are_the_rows_the_plan_reads(results):
    assert results[0]["fsdp_rows"] and results[1]["fsdp_rows"]


RUN_ID = "endpoints"


class RecordingStore(dist.Store):
    """The role loop's client: records every call made from weight-sync code or another thread."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.foreign = inner, []

    def _note(self, op, key):
        """Foreign: made by weight-sync code itself (the innermost llamarl_core frame is
        transport/ddma*.py; the role's own interrupt callback, run by it, is the role's) or
        on another thread than the role loop's."""
        f = sys._getframe(1)
        while f is not None and "llamarl_core" not in f.f_code.co_filename:
            f = f.f_back
        by_ddma = f is not None and re.search(r"transport/ddma(_\w+)?\.py$", f.f_code.co_filename) is not None
        if by_ddma or threading.current_thread() is not threading.main_thread():
            self.foreign.append((op, str(key), threading.current_thread().name))

    def set(self, key, value):
        self._note("set", key)
        return self.inner.set(key, value)

    def get(self, key):
        self._note("get", key)
        return self.inner.get(key)

    def add(self, key, n):
        self._note("add", key)
        return self.inner.add(key, n)

    def check(self, keys):
        self._note("check", keys)
        return self.inner.check(keys)

    def wait(self, keys, timeout=None):
        self._note("wait", keys)
        return self.inner.wait(keys) if timeout is None else self.inner.wait(keys, timeout)

    def compare_set(self, key, expected, desired):
        self._note("compare_set", key)
        return self.inner.compare_set(key, expected, desired)

    def delete_key(self, key):
        self._note("delete_key", key)
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()


def _model():
    from llamarl_core.models import Llama, ModelArgs
    torch.manual_seed(0)
    return Llama(ModelArgs(vocab_size=64, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32,
                           max_seq_len=16, rope_theta=10000.0)).requires_grad_(False)


def _endpoints(rank, store):
    from llamarl_core.config.load import load_config
    from llamarl_core.executors.context import RoleRuntime
    from llamarl_core.executors.pipeline import weight_sync_config
    from llamarl_core.executors.weights import make_receiver, make_sender
    from llamarl_core.plan.plan import make_plan
    from llamarl_core.transport.links import StoreAddress
    from llamarl_core.transport.control import RUN_ID_KEY, ControlPlane, run_prefix
    from llamarl_core.transport.parallel import local_shards

    if rank == 0:
        store.set(RUN_ID_KEY, RUN_ID)
    store.wait([RUN_ID_KEY])
    cfg = load_config("cpu_tiny", ["controller.weight_transport=collective", "controller.step_timeout_s=30"])
    plan = make_plan(cfg, require_data=False)  # one trainer rank, one node
    role_store = RecordingStore(dist.PrefixStore(run_prefix(RUN_ID), store))
    role = "trainer" if rank == 0 else "generator"
    rt = RoleRuntime(role, 0, {"trainer": [0], "generator": [1]}, ControlPlane(role_store), None,
                     address=StoreAddress("127.0.0.1", store.port, RUN_ID, cfg.controller.startup_timeout_s),
                     step_timeout_s=cfg.controller.step_timeout_s)
    sync = weight_sync_config(cfg, plan)
    model = _model()
    if rank == 0:
        sender = make_sender(rt, sync, model, 0)
        warmed = sender.warmed_up
        for v in (0, 1):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(1.0)
            sender.send(local_shards(model, 1, 0), v)
        sender.close()
        return {"foreign": role_store.foreign, "warmed_up": warmed}
    full = dict(model.named_parameters())
    params = {n: torch.zeros_like(p) for n, p in full.items()}
    receiver = make_receiver(rt, sync, params, full, model.args)
    warmed = receiver.warmed_up  # set by the constructor, before any send
    equal = []
    for v in (0, 1):
        stats = receiver.receive()
        equal.append(stats.version == v and all(torch.equal(params[n], p + v + 1) for n, p in full.items()))
    receiver.close()
    return {"foreign": role_store.foreign, "warmed_up": warmed, "equal": equal}


def test_weight_sync_endpoints_use_their_own_store_client_and_warm_up_every_pair(results):
    # Fails on the old code: the endpoints were handed `ctx.control.store` (every handshake
    # call went through it) and had no warm-up.
    trainer, generator = results[0]["endpoints"], results[1]["endpoints"]
    assert trainer["foreign"] == [] and generator["foreign"] == []  # the role loop's client untouched
    assert trainer["warmed_up"] == [2] and generator["warmed_up"] == [1]  # each peer's member index + 1
    assert generator["equal"] == [True, True]


def _live_bytes() -> int:
    """Bytes of every live tensor storage in this process (each storage once)."""
    import gc
    seen = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type != "meta":
            storage = obj.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def _generator_memory(rank, store):
    """Ranks 2 (trainer) and 3 (a generator rank built as GeneratorExecutor builds it): after
    a sync the engine computes from the slot itself, and the process holds what the plan says."""
    from llamarl_core.config.load import load_config
    from llamarl_core.executors.chunks import ChunkGenerator
    from llamarl_core.executors.pipeline import chunk_config
    from llamarl_core.executors.setup import PromptSet
    from llamarl_core.models.build import build_meta_model, materialize_zeros
    from llamarl_core.generation.fused import fused_param_groups
    from llamarl_core.plan.memory import GIB, generator_memory
    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
    from llamarl_core.transport.ddma_plan import build_plan

    cfg = load_config("cpu_tiny", ["resources.generator.max_batch_size=8", "generation.max_prompt_tokens=16",
                                   "generation.max_new_tokens=16", "algorithm.group_size=2",
                                   "algorithm.prompts_per_step=4"])
    model, tok = build_meta_model(cfg.model, dtype="float32")
    shapes = {n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters()}
    plan = build_plan(shapes, trainer_ranks=1, generator_ranks=1, groups=fused_param_groups(shapes))
    kw = dict(transport="shm", store=dist.PrefixStore("memory", store), timeout_s=60, run_id="ddma-memory")
    if rank == 2:
        torch.manual_seed(0)
        from llamarl_core.models import Llama
        trained = Llama(model.args)
        sender = DdmaSender(plan, 0, **kw)
        for v in (0, 1):
            sender.send({n: p.detach() + v for n, p in trained.named_parameters()}, v)
        sender.close()
        return None
    model.requires_grad_(False)
    materialize_zeros(model, "cpu")
    prompts = PromptSet(examples=[None] * 4, prompt_ids=[[1] + [7] * 15] * 4)  # full-length prompts: a full cache
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, prompts, 0, 1)
    receiver = DdmaReceiver(plan, 0, dict(model.named_parameters()), **kw)
    outside = []
    for v in (0, 1):
        receiver.receive()
        chunks.engine.refresh_weights()
        chunks.generate(chunk=v, policy_version=v)
        slot = receiver.slots[v % 2]
        lo, hi = slot.data_ptr(), slot.data_ptr() + slot.numel()
        outside += [f"v{v} {key}" for key, proj in chunks.engine.proj.items()
                    if not lo <= proj.weight.data_ptr() < hi]
    want = generator_memory(model.args, tp=1, pp=1, dtype="float32", quantization="none", batch=8,
                            prompt_tokens=16, seq_tokens=32)
    receiver.close()
    return {"outside": outside, "live_bytes": _live_bytes(), "planned_bytes": (want.weights + want.kv_cache) * GIB,
            "slot_bytes": plan.slot_nbytes[0]}


def test_after_a_sync_the_engine_computes_from_the_slot_and_holds_what_the_plan_says(results):
    # Fails on the old code: the engine concatenated fresh fused copies after every sync (3
    # copies of the weights live, the plan counting 1), and no projection lay in a slot.
    memory = results[3]["memory"]
    assert memory["outside"] == []  # every projection is a view into the slot it computes from
    ratio = memory["live_bytes"] / memory["planned_bytes"]  # the plan's resident terms: weights + KV cache
    assert 0.9 <= ratio <= 1.1, memory
