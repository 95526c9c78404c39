"""The generator role (async mode): sample with the newest weights held, never wait for
the trainer except to stay within `max_offpolicy_steps` (k).

    loop:
      ┌─ a newer version has fully arrived in the staging slot? → adopt it (DDMA swap), continue
      ├─ previous chunk not yet taken by the reward role? → poll (stay joinable for syncs)
      ├─ chunk n would be more than k versions stale when trained? → wait for weights
      └─ generate chunk n with version u, each prompt group isent to the reward rank the
         moment its last sample ends; between decode steps, newly published weights are
         received in place (rows record the versions they ran under) ; n += 1

Credit rule: the trainer consumes replica i's chunks in order, one per step, skipping
dropped ones, so chunk n is trained at step v = n - dropped_i. Starting it only when the
held version u ≥ v - k keeps every rollout within k versions of the policy that trains on it.

Streaming (generation.streaming, the default in async mode; executors/stream.py):
the "generate chunk n" step becomes one engine run over chunks n, n+1, ...: a row that ends
frees its slot for the next prompt, from the next chunk once this one's have all started,
each chunk gated by the same credit rule before its first row starts. The run ends when the
gate closes and the last row ends (then: swap or wait, as above). Under TP the leader
announces the stream and broadcasts each start-or-not decision; followers replay it.

Tensor parallelism (resources.generator.tp > 1): a replica is tp ranks running one sharded
engine; TP rank 0 runs the loop above and announces each step, the others follow
(replica.py). The DDMA weight sync delivers each TP rank only its slice (tp_layout.py); TP rank
0 decides when the replica swaps, and every rank swaps at the same step.
"""
from __future__ import annotations

import time

from llamarl_core.config.streaming import streaming_active
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.stream import ChunkStream, StreamCut
from llamarl_core.executors.setup import build_meta_model, encode_prompts, load_split, materialize_zeros
from llamarl_core.transport.channels import TAG_TO_REWARD, AsyncSender, LinkBroken
from llamarl_core.transport import checksums
from llamarl_core.executors.context import Stopped, WorkerContext
from llamarl_core.executors import fp8_weights
from llamarl_core.executors.weights import fp8_wire, make_receiver
from llamarl_core.executors.replica import ReplicaRank, ReplicaSteps
from llamarl_core.executors.quant_probe import QuantKL
from llamarl_core.executors import rejoin

POLL_S = 0.02  # store polls per generator rank: 50/s, light even for hundreds of ranks
# Decode steps between two looks for new weights inside a chunk: each look is store round trips
# (and a broadcast under TP), a decode step on a GPU a few milliseconds.
SWAP_POLL_STEPS = 8

class GeneratorExecutor:
    def __init__(self, ctx: WorkerContext):
        cfg, g = ctx.cfg, ctx.cfg.resources.generator
        self.ctx = ctx
        # Built on the meta device and allocated only as this rank's TP slice: every weight
        # arrives from the trainer (version 0 before the first chunk), so no generator rank
        # ever reads the checkpoint or holds the full model (tp > 1).
        self.model, self.tokenizer = build_meta_model(cfg, dtype=g.dtype)
        self.model.requires_grad_(False)
        full = dict(self.model.named_parameters())  # full shapes, before any TP sharding
        self.rank = ReplicaRank.of(ctx)
        token_sync = self.rank.shard(self.model)
        materialize_zeros(self.model, ctx.device)
        self.steps = ReplicaSteps(ctx, self.rank, POLL_S)
        prompts = encode_prompts(cfg, load_split(cfg, "train"), self.tokenizer)
        self.chunks = ChunkGenerator(cfg, self.model, self.tokenizer, prompts, self.rank.replica,
                                     self.rank.num_replicas, g.quantization, token_sync=token_sync)
        # Read after the engine adopted its storage (fused projections): what this rank holds.
        self.params = dict(self.model.named_parameters())
        self.fp8_wire = fp8_wire(ctx)
        if self.fp8_wire:  # the engine's linears arrive quantized (fp8 + scales): receive those
            self.params = fp8_weights.wire_params(self.params)
            fp8_weights.release_full_precision(self.model)
            fp8_weights.bind(self.chunks.engine, self.model, self.params)
        # DDMA: this rank receives only its TP slice, straight into its staging slot.
        self.receiver = make_receiver(ctx, self.params, full, self.model.args)
        self.quant_kl = QuantKL(self.model, "none" if self.fp8_wire else g.quantization)
        self.held = -1
        self.last_sync: dict = {}
        self.decode_turns = 0  # between_steps calls: the same count on every TP rank of a replica
        self.streaming = streaming_active(cfg)
        self.stream = ChunkStream(self.chunks) if self.streaming else None
        self.cut_by_restart = False

    def _receive(self) -> None:
        """Adopt the next version (a slot swap; blocks only until this rank's slice has arrived,
        which for a TP follower is the send its leader saw complete)."""
        with self.ctx.timeline.span("sync"):
            stats = self.receiver.receive()
        self.chunks.engine.refresh_weights()
        self.held = stats.version
        self.ctx.control.set_held(self.ctx.global_rank, self.held)
        self.last_sync = {"seconds": stats.seconds, "gbps": stats.gbps, "version": stats.version}
        if self.ctx.cfg.run.weight_checksums:
            checksums.record(self.ctx.run_dir, "generator", self.ctx.local_rank, self.held, self.params,
                             **self._slice_fields())

    def _slice_fields(self) -> dict:
        r = self.rank
        return {"replica": r.replica, "tp_rank": r.tp_rank, "tp": r.tp} if r.tp > 1 else {}

    def run(self) -> None:
        if not self.rank.is_leader:
            self._follow()
        ctx, k = self.ctx, self.ctx.cfg.algorithm.max_offpolicy_steps
        self.links, self.watch = rejoin.links(ctx), rejoin.watch(ctx, ["reward"])
        sender, link = self._connect()
        # > 0 on resume or after a restart: the first chunk the trainer has not consumed
        chunk = rejoin.start_chunk(ctx, self.rank.replica)
        t0 = time.time()
        while not ctx.should_stop():
            try:
                if self.watch.poll():  # the reward role was restarted: what it held is lost
                    sender, link = self._connect()
                    chunk = rejoin.start_chunk(ctx, self.rank.replica)
                    continue
                if self.receiver.ready():
                    self.steps.announce("sync")
                    self._receive()
                    continue
                if not self._may_generate(sender, chunk, k):
                    with ctx.timeline.span("wait"):
                        self._wait_until_ready(sender, chunk, k)
                    continue
                if self.stream is not None:
                    chunk = self._stream(sender, link, chunk, k, t0)
                    continue
                self.steps.announce("generate", chunk=chunk, version=self.held)
                with ctx.timeline.span("generate", chunk=chunk, version=self.held):
                    rollout = self.chunks.generate(
                        chunk, self.held, on_group=lambda part: self._send(sender, part, link),
                        between_steps=self._swap_if_published)
            except LinkBroken as e:  # the reward rank died: wait for the controller's verdict
                rejoin.await_verdict(ctx, self.watch, e)
                sender, link = self._connect()
                chunk = rejoin.start_chunk(ctx, self.rank.replica)
                continue
            except StreamCut:  # the stream saw the reward role restarted, or the run end
                if self.cut_by_restart:
                    self.cut_by_restart = False
                    sender, link = self._connect()
                    chunk = rejoin.start_chunk(ctx, self.rank.replica)
                continue
            self.quant_kl.measure(rollout, self.held)
            chunk += 1
            self._publish_stats(t0)
        self.steps.announce("stop")
        raise Stopped()

    def _stream(self, sender: AsyncSender, link, chunk: int, k: int, t0: float) -> int:
        """Streaming: chunks chunk, chunk+1, ... in one engine run; the next chunk to start."""
        def may_start(n: int) -> bool:
            try:
                if self.ctx.should_stop():
                    raise StreamCut()
                if self.watch.poll():  # the reward role was restarted: what it held is lost
                    self.cut_by_restart = True
                    raise StreamCut()
                sender.idle()  # raises LinkBroken once a send failed
                start = n - self.ctx.control.dropped(self.rank.replica) <= self.held + k
            except (StreamCut, LinkBroken):
                self.rank.agree(True)  # TP followers cut their stream at the same turn
                raise
            self.rank.agree(False)
            return self.rank.agree(start)

        self.steps.announce("stream", chunk=chunk, version=self.held)
        with self.ctx.timeline.span("generate", chunk=chunk, version=self.held, streaming=True):
            nxt = self.stream.run(chunk, may_start, lambda: self.held,
                                  on_group=lambda part: self._send(sender, part, link),
                                  between_steps=self._swap_if_published,
                                  on_chunk=lambda n: self._chunk_done(t0))
        return nxt

    def _chunk_done(self, t0: float | None = None) -> None:
        """A streamed chunk's rows have all ended: its quantization probe (every TP rank at the
        same decode step, like the chunk loop's) and, on the leader, the stats."""
        self.quant_kl.measure(self.stream.completed, self.held)
        if t0 is not None:
            self._publish_stats(t0)

    @staticmethod
    def _send(sender: AsyncSender, part, link) -> None:
        """Hand a prompt group to the sender; a broken link is not raised inside the engine's
        decode loop (the chunk ends cleanly and is generated again): `sender.idle()` raises
        it at the loop's next turn."""
        try:
            sender.send(part, link, TAG_TO_REWARD)
        except LinkBroken:
            pass

    def _connect(self) -> tuple[AsyncSender, object]:
        """A fresh sender and link to this replica's reward rank, in the epochs of now."""
        self.links.drop("reward")
        reward = rejoin.endpoint(self.ctx, "reward", self.ctx.reward_rank_for(self.rank.replica))
        return AsyncSender("rollout-sender"), self.links.get(rejoin.my_endpoint(self.ctx), reward, sending=True)

    def _follow(self) -> None:
        """TP ranks 1..: do the leader's steps; their copy of each rollout is dropped."""
        while True:
            step = self.steps.next()
            if step["do"] == "stop":
                raise Stopped()
            if step["do"] == "sync":
                self._receive()
                continue
            if step["do"] == "stream":
                self._follow_stream(step)
                continue
            if step["version"] != self.held:
                raise RuntimeError(f"generator rank {self.ctx.local_rank} holds weight version {self.held} "
                                   f"but TP rank 0 of replica {self.rank.replica} generates with "
                                   f"{step['version']}")
            with self.ctx.timeline.span("generate", chunk=step["chunk"], version=self.held):
                rollout = self.chunks.generate(step["chunk"], self.held, between_steps=self._swap_if_published)
            self.quant_kl.measure(rollout, self.held)  # its forwards all-reduce with the leader's

    def _follow_stream(self, step: dict) -> None:
        """A TP follower's copy of the leader's stream: the same engine run, each chunk
        started (or the stream cut) as the leader decides at the same refill."""
        def may_start(n: int) -> bool:
            if self.rank.agree(False):
                raise StreamCut()
            return self.rank.agree(False)
        with self.ctx.timeline.span("generate", chunk=step["chunk"], version=self.held, streaming=True):
            try:
                self.stream.run(step["chunk"], may_start, lambda: self.held,
                                between_steps=self._swap_if_published, on_chunk=lambda n: self._chunk_done())
            except StreamCut:
                pass

    def _swap_if_published(self) -> int:
        """Between decode steps: take newer weights in place (the trainer need not wait for
        this chunk to end); the engine tags each running sample with the version returned.
        With TP, TP rank 0 decides for its replica (every rank must swap at the same step).
        Looked at every SWAP_POLL_STEPS steps only."""
        self.decode_turns += 1
        if self.decode_turns % SWAP_POLL_STEPS:
            return self.held
        swap = (self.rank.is_leader and not self.ctx.should_stop()
                and self.receiver.ready())  # never blocks: a version that has fully arrived
        if self.rank.agree(swap):
            self._receive()
        return self.held

    def _may_generate(self, sender: AsyncSender, chunk: int, k: int) -> bool:
        """Weights held, the last chunk was taken, and chunk n is trained at n - dropped ≤ held + k."""
        return (self.held >= 0 and (sender.idle() or self.streaming)
                and chunk - self.ctx.control.dropped(self.rank.replica) <= self.held + k)

    def _wait_until_ready(self, sender: AsyncSender, chunk: int, k: int) -> None:
        """Until `_may_generate`, or new weights arrive, or the run ends."""
        while not self.ctx.should_stop() and not self.receiver.ready():
            if self._may_generate(sender, chunk, k):
                return
            time.sleep(POLL_S)

    def _publish_stats(self, t0: float) -> None:
        self.ctx.control.set_stats("generator", self.rank.replica, {
            **self.chunks.stats(since=t0), **self.quant_kl.stats(), "held_version": self.held,
            "sync": self.last_sync,
            **self.ctx.timeline.totals()})

    def close(self) -> None:
        self.receiver.close()
