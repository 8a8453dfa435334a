"""N data-parallel learners: one in this process, or N Ray actors in one ``torch.distributed`` group.

Rendezvous (how the group forms on any cluster): the driver starts the N learner actors wherever
Ray places them (their ``num_gpus`` and custom ``resources``), then asks rank 0 to open the group's
key-value store: rank 0 takes its own node's address (``ray.util.get_node_ip_address()`` inside
the actor) and a ``torch.distributed.TCPStore`` listening on a port its own OS picks (port 0, so
nothing is probed and released for someone else to take). The address and port go back to the
driver, which hands them to every rank; all ranks then join ``init_process_group`` on that store,
NCCL when the learners have GPUs, gloo otherwise. The driver only relays: no address or port of the
driver's machine is used, so the driver may run anywhere (a laptop, the head node, a job pod) and
the learners on other nodes.

One learner with no custom resources trains in the driver process (serial mode, and the GPU path
of a one-box run); one learner with ``resources`` is a Ray actor like N of them.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch

from learner.learner import DemoParts, Demos, ImitationData, Learner, LearnerSettings
from policy.network import ActorCritic
from rollout.fragment import Batch

R = TypeVar("R")

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 300.0  # longest wait for all ranks to join the group (then a clear error, not a hang)


def _node() -> dict[str, Any]:
    """Where this process runs: Ray node id and address, host, pid (for logs and provenance)."""
    import ray  # heavy optional dependency: only the Ray actor shell needs it

    return dict(
        node_id=ray.get_runtime_context().get_node_id(),
        ip=ray.util.get_node_ip_address(),
        host=socket.gethostname(),
        pid=os.getpid(),
    )


class LearnerWorker:
    """A Learner inside a Ray actor; rank 0 also holds the group's store (``serve``)."""

    def __init__(self, build_policy: Callable[[], ActorCritic], settings: LearnerSettings, rank: int, world: int):
        torch.set_num_threads(max(1, int(os.environ.get("SPLATDRIVE_LEARNER_THREADS", "1"))))
        self.build_policy, self.settings = build_policy, settings
        self.rank, self.world = rank, world
        self.store: Any = None  # torch.distributed.TCPStore once serving or joined
        self.learner: Learner | None = None
        self.backend = ""
        if world == 1:  # a group of one needs no process group
            self._build()

    def _build(self) -> None:
        torch.manual_seed(self.settings.seed)
        self.learner = Learner(self.build_policy(), self.settings, self.rank, self.world)

    def node(self) -> dict[str, Any]:
        return _node()

    def serve(self, timeout_s: float = JOIN_TIMEOUT_S) -> tuple[str, int]:
        """Rank 0: open the group's TCPStore on this node, on a port the OS picks; (address, port)."""
        import ray  # heavy optional dependency (see _node)
        import torch.distributed as dist

        assert self.rank == 0, "only rank 0 serves the rendezvous"
        addr = ray.util.get_node_ip_address()
        self.store = dist.TCPStore(
            addr,
            0,
            self.world,
            is_master=True,
            timeout=datetime.timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        return addr, int(self.store.port)

    def join(self, addr: str, port: int, timeout_s: float = JOIN_TIMEOUT_S) -> str:
        """Join the group at rank 0's store; builds this rank's Learner. Returns the backend."""
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        if self.store is None:
            self.store = dist.TCPStore(addr, int(port), self.world, is_master=False, timeout=timeout)
        cuda = self.settings.device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(0)  # Ray exposes this actor's GPU(s) only: the first is ours
        self.backend = "nccl" if cuda else "gloo"
        dist.init_process_group(self.backend, store=self.store, rank=self.rank, world_size=self.world, timeout=timeout)
        self._build()
        return self.backend

    def call(self, method: Callable[..., R], *args, **kwargs) -> R:
        """``method`` (a Learner method, e.g. ``Learner.update_rl``) on this rank's Learner."""
        assert self.learner is not None, "the learner joins its group before it is called"
        return method(self.learner, *args, **kwargs)


class LearnerGroup:
    """``num_learners`` Learners: in this process for one, else Ray actors all-reducing gradients.

    resources: Ray custom resources each learner actor asks for (e.g. ``{"learner_node": 1}`` to keep
    learners on the nodes that offer it); given, even one learner runs as an actor.
    """

    def __init__(
        self,
        build_policy: Callable[[], ActorCritic],
        settings: LearnerSettings,
        num_learners: int = 1,
        gpus_per_learner: float = 0.0,
        resources: Mapping[str, float] | None = None,
        join_timeout_s: float = JOIN_TIMEOUT_S,
        threads: int = 0,
    ):
        self.n = int(num_learners)
        # the in-driver learner's torch threads while it updates (0: every core): in serial mode the rollouts
        # (one thread) and the update take turns in this process, so the update may use the whole machine
        self.threads = int(threads) or (os.cpu_count() or 1)
        if self.n < 1:
            raise ValueError(f"num_learners must be >= 1, got {num_learners}")
        if gpus_per_learner < 0:
            raise ValueError(f"gpus_per_learner must be >= 0, got {gpus_per_learner}")
        self.resources = {str(k): float(v) for k, v in (resources or {}).items()}
        self.actors: list = []
        self.backend = "none"  # the torch.distributed backend ("none" for a single learner)
        self.rendezvous: tuple[str, int] | None = None
        if gpus_per_learner:
            settings = dataclasses.replace(settings, device="cuda")
        self.device = settings.device
        if self.n == 1 and not self.resources:
            if self.device.startswith("cuda") and not torch.cuda.is_available():
                raise ValueError(
                    f"gpus_per_learner={gpus_per_learner} with num_learners=1 trains in the driver process, which "
                    "sees no CUDA device: run the driver on a GPU node, or give the learner a Ray resource "
                    "(learner_resources.<name>=1, or num_learners >= 2) so that it runs as an actor on a GPU node"
                )
            torch.manual_seed(settings.seed)
            self.local: Learner | None = Learner(build_policy(), settings)
            return
        import ray  # heavy optional dependency: the in-process learner above runs without it

        self._ray = ray
        self.local = None
        opts: dict[str, Any] = dict(num_cpus=1)
        if gpus_per_learner:
            opts["num_gpus"] = gpus_per_learner
        if self.resources:
            opts["resources"] = self.resources
        cls = ray.remote(LearnerWorker)
        self.actors = [cls.options(**opts).remote(build_policy, settings, r, self.n) for r in range(self.n)]
        try:
            if self.n > 1:
                self._form(join_timeout_s)
            else:
                ray.get(self.actors[0].node.remote())  # fail fast if the actor cannot start
        except BaseException:
            self.shutdown()
            raise

    def _form(self, timeout_s: float) -> None:
        """Rank 0 opens the store on its node; every rank joins it (see the module docstring)."""
        ray = self._ray
        addr, port = ray.get(self.actors[0].serve.remote(timeout_s))
        self.rendezvous = (addr, port)
        log.info("learner group: %d ranks rendezvous at rank 0's store %s:%d", self.n, addr, port)
        try:
            backends = ray.get([a.join.remote(addr, port, timeout_s) for a in self.actors])
        except Exception as e:
            raise RuntimeError(
                f"learner group: {self.n} learners could not form a torch.distributed group at rank 0's "
                f"store {addr}:{port} (every learner node must reach rank 0's node on that port): {e}"
            ) from e
        self.backend = backends[0]

    def nodes(self) -> list[dict[str, Any]]:
        """Where each rank runs (node id, address, host, pid); the driver's own for one local learner."""
        if self.local is not None:
            ray = sys.modules.get("ray")  # not imported (or not installed): Ray is not running here
            if ray is not None and ray.is_initialized():
                return [dict(_node(), rank=0)]
            return [dict(node_id="", ip="", host=socket.gethostname(), pid=os.getpid(), rank=0)]
        return [dict(n, rank=r) for r, n in enumerate(self._ray.get([a.node.remote() for a in self.actors]))]

    def describe(self) -> dict[str, Any]:
        """What provenance records about the group: size, backend, device, rendezvous point, placement."""
        rdv = None if self.rendezvous is None else f"{self.rendezvous[0]}:{self.rendezvous[1]}"
        return dict(
            num_learners=self.n,
            in_driver=self.local is not None,
            backend=self.backend,
            device=self.device,
            rendezvous=rdv,
            resources=self.resources,
            ranks=self.nodes(),
        )

    def _call(self, method: Callable[..., R], *args) -> R:
        """``method`` (a Learner method) on every rank; rank 0's result."""
        if self.local is not None:
            before = torch.get_num_threads()
            torch.set_num_threads(self.threads)
            try:
                return method(self.local, *args)
            finally:
                torch.set_num_threads(before)
        ray = self._ray
        # batches, demonstrations and weights: one copy in the object store for all ranks
        refs = [ray.put(a) if isinstance(a, dict | Batch | Demos | DemoParts) else a for a in args]
        return ray.get([w.call.remote(method, *refs) for w in self.actors])[0]

    # -- what the learners do (each on every rank; rank 0's result) --------------------------------
    def update_rl(
        self, batch: Batch, demos: ImitationData | None = None, critic_only: bool = False
    ) -> dict[str, float]:
        """PPO epochs on the gathered fragments (``Learner.update_rl``; critic_only: the value loss alone):
        the diagnostics."""
        return self._call(Learner.update_rl, batch, demos, critic_only)

    def update_il(self, demos: ImitationData, steps: int) -> dict[str, float]:
        """``steps`` imitation minibatches (``Learner.update_il``): the diagnostics."""
        return self._call(Learner.update_il, demos, steps)

    def merge_obs_stats(self, demos: Demos) -> None:
        self._call(Learner.merge_obs_stats, demos)

    def weights(self) -> dict[str, torch.Tensor]:
        """The policy's weights and normalisation buffers, on CPU."""
        return self._call(Learner.weights)

    def state(self) -> dict[str, Any]:
        """Everything a checkpoint keeps of the learner (``Learner.state``)."""
        return self._call(Learner.state)

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._call(Learner.load_state, state)

    def set_settings(self, settings: LearnerSettings, stage: str | None = None) -> None:
        self._call(Learner.set_settings, settings, stage)

    def shutdown(self) -> None:
        for a in self.actors:
            try:
                self._ray.kill(a)
            except Exception:
                pass
        self.actors = []
