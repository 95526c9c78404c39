"""The generator role (async mode): sample with the newest weights held, never wait for
the trainer except to stay within `max_offpolicy_steps` (k).

    loop:
      ┌─ a newer version has fully arrived in the staging slot? → adopt it (DDMA swap), continue
      ├─ a send to the reward rank failed? → wait for the controller's verdict (restart)
      ├─ chunk n not admitted (executors/admission.py: n − extra ≤ held + k)? → wait for weights
      └─ stream chunks n, n+1, ... (executors/stream.py), each prompt group sent to the reward
         rank the moment its last sample ends; between decode steps, newly published weights
         are received in place (rows record the versions they ran under)

The decisions are generate_loop.py's, the staleness bound admission.py's, the stream's refill
stream.py's; this class wires them to DDMA, the store and the reward links. Under TP
(resources.generator.tp > 1) TP rank 0 runs the loop and announces each step, the others
replay it (replica.py); the weight sync gives each TP rank only its slice (tp_layout.py).
"""
from __future__ import annotations

import time

from llamarl_core.config.schema import DataConfig, GeneratorResources, ModelConfig
from llamarl_core.executors import rejoin
from llamarl_core.executors.adapter_sync import make_adapter_receiver
from llamarl_core.executors.chunks import ChunkConfig, ChunkGenerator
from llamarl_core.executors.context import RoleRuntime, Stopped
from llamarl_core.executors.generate_loop import POLL_S, GenerateLoop
from llamarl_core.executors.replica import ReplicaRank, ReplicaSteps
from llamarl_core.executors.setup import encode_prompts, load_split
from llamarl_core.executors.stream import ChunkStream, StreamCut
from llamarl_core.executors.weights import WeightSyncConfig, make_receiver
from llamarl_core.generation import fp8_weights
from llamarl_core.generation.quant_probe import QuantKL
from llamarl_core.generation.lora_merge import changed_projections
from llamarl_core.models.build import build_meta_model, build_model, materialize_zeros
from llamarl_core.transport import checksums
from llamarl_core.transport.channels import TAG_TO_REWARD, AsyncSender, LinkBroken


class GeneratorExecutor:
    def __init__(self, ctx: RoleRuntime, chunk_cfg: ChunkConfig, model: ModelConfig, data: DataConfig,
                 resources: GeneratorResources, weight_sync: WeightSyncConfig, max_offpolicy_steps: int):
        """`model`: what to build (its weights all come from the trainer, or with LoRA its base
        from the checkpoint or preset and only the adapters from the trainer); `data`: the train
        prompts; `resources`: resources.generator (dtype, quantization)."""
        g, self.chunk_cfg = resources, chunk_cfg
        self.ctx, self.weight_sync = ctx, weight_sync
        self.rank = ReplicaRank.of(ctx)
        self.steps = ReplicaSteps(ctx, self.rank, POLL_S)
        self.fp8_wire = weight_sync.fp8
        if weight_sync.adapters_only:
            self._build_lora(model, data, g)
        else:
            self._build_received(model, data, g)
        self.quant_kl = QuantKL(self.model, "none" if self.fp8_wire else g.quantization)
        # The decisions (adopt, staleness window, swap between decode steps): generate_loop.py.
        self.loop = GenerateLoop(self.chunks, self.receiver, ctx.control, replica=self.rank.replica,
                                 global_rank=ctx.global_rank,
                                 max_offpolicy_steps=max_offpolicy_steps,
                                 should_stop=ctx.should_stop, span=ctx.timeline.span, agree=self.rank.agree,
                                 is_leader=self.rank.is_leader, on_adopt=self._record_checksums)
        self.stream = ChunkStream(self.chunks)
        self.cut_by_restart = False

    def _build_received(self, model: ModelConfig, data: DataConfig, g: GeneratorResources) -> None:
        # Built on the meta device and allocated only as this rank's TP slice: every weight
        # arrives from the trainer (version 0 before the first chunk), so no generator rank
        # ever reads the checkpoint or holds the full model (tp > 1).
        self.model, self.tokenizer = build_meta_model(model, dtype=g.dtype)
        self.model.requires_grad_(False)
        full = dict(self.model.named_parameters())  # full shapes, before any TP sharding
        token_sync = self.rank.shard(self.model)
        materialize_zeros(self.model, self.ctx.device)
        self.chunks = self._chunk_generator(data, g, token_sync)
        # Read after the engine adopted its storage (fused projections): what this rank holds.
        self.params = dict(self.model.named_parameters())
        if self.fp8_wire:  # the engine's linears arrive quantized (fp8 + scales): receive those
            self.params = fp8_weights.wire_params(self.params)
            fp8_weights.release_full_precision(self.model)
            fp8_weights.bind(self.chunks.engine, self.model, self.params)
        # DDMA: this rank receives only its TP slice, straight into its staging slot.
        self.receiver = make_receiver(self.ctx, self.weight_sync, self.params, full, self.model.args)

    def _build_lora(self, model: ModelConfig, data: DataConfig, g: GeneratorResources) -> None:
        """LoRA (model.lora.rank > 0; TP 1, no fp8: config/plan checks): this rank builds the
        frozen base itself, as the trainer does (same seed), and receives only the adapters,
        merged into the engine's weights at each adoption (executors/adapter_sync.py)."""
        lora = model.lora
        self.model, self.tokenizer = build_model(model, dtype=g.dtype, device=str(self.ctx.device),
                                                 seed=self.chunk_cfg.seed)
        self.model.requires_grad_(False)
        self.chunks = self._chunk_generator(data, g, None)
        self.receiver = make_adapter_receiver(self.ctx, self.weight_sync, self.model, lora.rank,
                                              lora.target_modules, lora.scale)
        self.params = self.receiver.params  # the adapters: what the checksums record
        # a quantized engine re-quantizes only the projections a merge rewrites
        self.chunks.engine.changed_projections = changed_projections(self.model, lora.target_modules)

    def _chunk_generator(self, data: DataConfig, g: GeneratorResources, token_sync) -> ChunkGenerator:
        prompts = encode_prompts(data, self.chunk_cfg.generation, load_split(data, "train"), self.tokenizer)
        return ChunkGenerator(self.chunk_cfg, self.model, self.tokenizer, prompts, self.rank.replica,
                              self.rank.num_replicas, g.quantization, token_sync=token_sync)

    @property
    def held(self) -> int:
        return self.loop.held

    def _record_checksums(self, version: int) -> None:
        if self.weight_sync.checksums:
            r = self.rank
            checksums.record(self.ctx.run_dir, "generator", self.ctx.local_rank, version, self.params,
                             **({"replica": r.replica, "tp_rank": r.tp_rank, "tp": r.tp} if r.tp > 1 else {}))

    def run(self) -> None:
        if not self.rank.is_leader:
            self._follow()
        ctx = self.ctx
        self.links, self.watch = rejoin.links(ctx), rejoin.watch(ctx, ["reward"])
        sender, link = self._connect()
        # > 0 on resume or after a restart: the first chunk the trainer has not consumed
        chunk = self._start_chunk()
        t0 = time.time()
        while not ctx.should_stop():
            try:
                if self.watch.poll():  # the reward role was restarted: what it held is lost
                    sender, link = self._connect()
                    chunk = self._start_chunk()
                    continue
                if self.receiver.ready():
                    self.steps.announce("sync")
                    self.loop.receive()
                    continue
                # the previous chunk need not be taken first (its groups stream out), but the wait
                # still asks the sender whether a send failed (LinkBroken: a reward restart must
                # end the wait, or the generator waits for weights forever)
                if not (sender.healthy() and self.loop.may_generate(chunk)):
                    with ctx.timeline.span("wait"):
                        self.loop.wait_until_ready(chunk, sender.healthy)
                    continue
                chunk = self._stream(sender, link, chunk, t0)
            except LinkBroken as e:  # the reward rank died: wait for the controller's verdict
                rejoin.await_verdict(ctx, self.watch, e)
                sender, link = self._connect()
                chunk = self._start_chunk()
                continue
            except StreamCut:  # the stream saw the reward role restarted, or the run end
                if self.cut_by_restart:
                    self.cut_by_restart = False
                    sender, link = self._connect()
                    chunk = self._start_chunk()
        self.steps.announce("stop")
        raise Stopped()

    def _stream(self, sender: AsyncSender, link, chunk: int, t0: float) -> int:
        """Chunks chunk, chunk+1, ... in one engine run; the next chunk to start."""
        def may_start(n: int) -> bool:
            try:
                if self.ctx.should_stop():
                    raise StreamCut()
                if self.watch.poll():  # the reward role was restarted: what it held is lost
                    self.cut_by_restart = True
                    raise StreamCut()
                sender.idle()  # raises LinkBroken once a send failed
                start = self.loop.admission.may_start(n, self.held)
            except (StreamCut, LinkBroken):
                self.rank.agree(True)  # TP followers cut their stream at the same turn
                raise
            self.rank.agree(False)
            return self.rank.agree(start)

        self.steps.announce("stream", chunk=chunk, version=self.held)
        with self.ctx.timeline.span("generate", chunk=chunk, version=self.held, streaming=True):
            nxt = self.stream.run(chunk, may_start, lambda: self.held,
                                  on_group=lambda part: self._send(sender, part, link),
                                  between_steps=self._look_for_weights,
                                  on_chunk=lambda n: self._chunk_done(n, t0))
        return nxt

    def _look_for_weights(self) -> int:
        """A streaming decode step's look for newer weights: at every step while the gate holds
        freed slots back (a newer version is what opens it), else every SWAP_POLL_STEPS."""
        return self.loop.swap_if_published(eager=self.stream.gated)

    def _start_chunk(self) -> int:
        """Where this replica (re)starts: the first chunk the trainer has not consumed."""
        return rejoin.start_chunk(self.ctx, self.rank.replica, self.chunk_cfg.prompts_per_step,
                                  self.chunk_cfg.group_size)

    def _chunk_done(self, chunk: int, t0: float | None = None) -> None:
        """A streamed chunk's rows have all ended: the stream's "generate" span gets a new
        segment (its busy time counts now, not when the stream ends), its quantization probe
        (every TP rank at the same decode step, like the chunk loop's) and, on the leader, the
        stats."""
        self.ctx.timeline.split(chunk=chunk + 1, version=self.held)
        self.quant_kl.measure(self.stream.completed, self.held)
        if t0 is not None:
            self._publish_stats(t0)

    def _send(self, sender: AsyncSender, part, link) -> None:
        """Hand a prompt group to the sender; a broken link is not raised inside the engine's
        decode loop (the chunk ends cleanly and is generated again): `sender.idle()` raises it
        at the loop's next turn."""
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
                self.loop.receive()
                continue
            self._follow_stream(step)  # "stream"

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
                                between_steps=self._look_for_weights, on_chunk=lambda n: self._chunk_done(n))
            except StreamCut:
                pass

    def _publish_stats(self, t0: float) -> None:
        self.ctx.control.set_stats("generator", self.rank.replica, {
            **self.chunks.stats(since=t0), **self.quant_kl.stats(), "held_version": self.held,
            "sync": self.loop.last_sync,
            **self.ctx.timeline.totals()})

    def close(self) -> None:
        self.chunks.close()
        self.receiver.close()
