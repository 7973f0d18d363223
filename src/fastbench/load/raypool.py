"""``--ray auto|ADDRESS``: one run's workers as Ray actors spread over a cluster's nodes, merged exactly.

The schedule, the start, the stop, the error-rate judgement and the merge are the ones of
``--workers`` (fastbench.load.workers.WorkerPool, which this extends); only the transport differs.
Each worker is a :class:`fastbench.load.rayworker.WorkerActor` running the same ``run_worker``; the
driver (this process) keeps the server's lifecycle, the /metrics scraper and the memory sampler.

* Placement: one placement group reserves the workers' CPUs. With ``--workers-per-node K`` (1 by
  default) it holds one bundle of K CPUs on each node that has them (STRICT_SPREAD: distinct nodes);
  with ``--workers N`` it holds N bundles of one CPU spread as evenly as Ray can (SPREAD). Worker
  ``i`` goes to bundle ``i mod bundles``, so a small run still reaches every node.
* Clocks. Every latency is a difference of stamps of one node's clock. For what sets stamps of
  different nodes side by side (the window's edges, the start instant, each row's send and receive
  instants in the time series) each node's offset to the driver's clock is estimated from many
  exchanges (fastbench.load.clocks: the shortest round trip bounds it) and recorded with its
  uncertainty and how it was made: UDP pings to the actor's clock responder
  (fastbench.load.udpclock, round trips of tens of us), else, when no UDP reply comes (a firewalled
  node), CLOCK_SAMPLES Ray actor calls (round trips of a millisecond or more), the result saying
  why. A node with the driver's kernel (same boot id) whose estimate agrees with zero shares the
  driver's clock: its offset is then exactly zero. The start instant is chosen on
  the driver's clock and sent to each node on its own; rows are put on the driver's clock as they
  arrive. Skew (a node's receive stamp less a server's send stamp, the server on the driver's host)
  is put on the driver's clock in the core, by the smallest offset the estimate allows (offset less
  uncertainty): no chunk's skew is then below its true value, none above it by more than twice the
  uncertainty, and every bound derived from skews holds (fastbench validate --ray).
* Transport: the driver polls every worker each REPORT_INTERVAL_S (its counts, and the rows it
  finished since, which the driver keeps); ``outcome()`` hands in the rest once it is done.
* Faults. A worker whose actor or node dies (a poll raises, or goes unanswered for LOST_AFTER_S) is
  lost: the rows it handed in stand, its requests claimed but unfinished are failed as WORKER_LOST,
  the run stops ("worker lost") and the result names the worker, its node and when. A worker that
  cannot start (its actor fails to build, its node has another fastbench, no room for the
  placement group within PLACEMENT_TIMEOUT_S, its own error before the window) fails the run at once.

Ray is imported only here, and only when a pool is built (``--ray``): the extra ``fastbench-llm[ray]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
from collections.abc import Awaitable
from typing import Any

import numpy as np

from fastbench._core import now_ns
from fastbench._version import __version__
from fastbench.exceptions import WorkerError
from fastbench.load.clocks import INSTANT_COLUMNS, ClockOffset, ClockSample, estimate_offset, shift_rows
from fastbench.load.merge import Part
from fastbench.load.plan import LoadPlan, Target
from fastbench.load.rayworker import WorkerActor, boot_id
from fastbench.load.udpclock import NoUdpReply, udp_offset
from fastbench.load.worker import REPORT_INTERVAL_S, WorkerOutcome
from fastbench.load.workerlink import Share, WorkerLink
from fastbench.load.workers import WorkerPool
from fastbench.results.records import NCOLS

__all__ = ("INSTANT_COLUMNS", "RayPool", "import_ray", "join_cluster", "shift_rows")

# Ray actor calls per node for its clock offset when UDP gets no reply: the shortest round trip of
# these bounds the estimate (UDP sends fastbench.load.udpclock.PINGS).
CLOCK_SAMPLES = 64
# How long the cluster has to find room for the placement group before the run fails.
PLACEMENT_TIMEOUT_S = 60.0
# A worker that answers no poll for this long is lost (its node is gone or cut off).
LOST_AFTER_S = 10.0
# An actor's first answer: its node starts a Ray worker process that imports fastbench (seconds on
# a busy machine), after the placement group has room.
ACTOR_START_TIMEOUT_S = 120.0
# From the chosen instant to the window's start: an actor call takes ~1 ms, but a busy node or a
# cluster across hosts needs more margin than processes of one machine.
RAY_START_MARGIN_NS = 250_000_000
# How long a stopped worker has to hand in its outcome.
OUTCOME_TIMEOUT_S = 60.0


def import_ray() -> Any:
    """The ray module, or a one-line error naming the extra that installs it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise WorkerError(f"--ray needs Ray: pip install 'fastbench-llm[ray]' ({exc})") from None


def join_cluster(ray: Any, address: str) -> bool:
    """Join the Ray cluster at ``address`` ("auto": the one this machine belongs to) unless this
    process has already; returns whether it joined here (and so is to leave it)."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, namespace="fastbench", log_to_driver=False, logging_level="ERROR")
    except Exception as exc:
        raise WorkerError(f"--ray {address}: cannot join the Ray cluster: {_first_line(exc)}") from None
    return True


@dataclasses.dataclass
class RayWorkerLink(WorkerLink):
    """The driver's end of one actor."""

    actor: Any = None
    bundle: int = 0
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)
    offset_ns: int = 0  # its node's clock minus the driver's
    skew_offset_ns: int = 0  # what its core subtracts from receive stamps for skew (see _Node)
    last_heard_ns: int = 0

    def send(self, kind: str, payload: Any) -> None:
        if self.actor is None:
            return
        if kind == "start":  # the driver's instant, on this worker's node
            self.actor.start.remote(int(payload) + self.offset_ns, self.skew_offset_ns)
        elif kind == "stop":
            self.actor.stop.remote(str(payload))
        elif kind == "others":
            self.actor.others.remote(payload)

    def pid(self) -> int | None:
        pid = self.identity.get("pid")
        return int(pid) if pid is not None else None

    def name(self) -> str:
        node = str(self.identity.get("node_id", "?"))[:12]
        return f"worker {self.index} (Ray actor, pid {self.pid()}, node {node} on {self.identity.get('host', '?')})"


@dataclasses.dataclass
class _Node:
    node_id: str
    host: str
    same_kernel: bool
    estimate: ClockOffset | None = None
    offset_ns: int = 0
    same_clock: bool = False
    estimate_after: ClockOffset | None = None  # again once the window is over: how far its clock moved
    clock_udp: str | None = None  # its clock responder's address (ip:port), None when the actor opened none
    clock_fallback: str | None = None  # why the estimate was not made by UDP (None: it was)
    clock_fallback_after: str | None = None  # the same, for estimate_after

    @property
    def uncertainty_ns(self) -> int:
        """How far the offset applied may be from the truth: 0 on the driver's own clock."""
        return 0 if self.same_clock or self.estimate is None else self.estimate.uncertainty_ns

    @property
    def skew_offset_ns(self) -> int:
        """The smallest offset the estimate allows: subtracted from the node's receive stamps for
        skew, it never makes a chunk look received before it was sent (a skew histogram clamps
        negative values, which would break the bounds derived from its spread)."""
        return self.offset_ns - self.uncertainty_ns


class RayPool(WorkerPool):
    """Runs one LoadPlan over Ray actors and returns one merged RunData (``run()``, ``stop(reason)``)."""

    # Actors on other nodes share no memory with the driver: a closed loop's requests are dealt up front.
    SHARED_MEMORY = False

    def __init__(self, target: Target, plan: LoadPlan, api_key: str | None = None, *, address: str,
                 workers: int | None = None, workers_per_node: int | None = None) -> None:
        super().__init__(target, plan, api_key, workers=max(1, workers or 1))
        if workers is not None and workers_per_node is not None:
            raise ValueError("give workers or workers_per_node, not both")
        self.address = address
        self.total = workers
        self.per_node = workers_per_node if workers_per_node is not None else (1 if workers is None else None)
        self.start_margin_ns = RAY_START_MARGIN_NS
        self._ray: Any = None
        self._connected_here = False
        self._group: Any = None
        self._bundles = 0
        self._strategy = ""
        self._nodes: dict[str, _Node] = {}
        self._actors: list[Any] = []
        self._killed = False

    # -- the transport ---------------------------------------------------------------------------------

    async def _prepare(self) -> int:
        ray = self._ray = import_ray()
        self._connected_here = await asyncio.to_thread(join_cluster, ray, self.address)
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if self.per_node is not None:
            fit = [n for n in nodes if float(n.get("Resources", {}).get("CPU", 0)) >= self.per_node]
            if not fit:
                raise WorkerError(f"--ray: no node of the cluster has {self.per_node} CPUs for "
                                  f"--workers-per-node {self.per_node}")
            self._bundles, self._strategy = len(fit), "STRICT_SPREAD"
            bundles = [{"CPU": float(self.per_node)}] * len(fit)
            count = len(fit) * self.per_node
        else:
            assert self.total is not None
            self._bundles, self._strategy = self.total, "SPREAD"
            bundles = [{"CPU": 1.0}] * self.total
            count = self.total
        placement = importlib.import_module("ray.util.placement_group")
        self._group = placement.placement_group(bundles, strategy=self._strategy)
        try:
            await asyncio.wait_for(self._await(self._group.ready()), PLACEMENT_TIMEOUT_S)
        except asyncio.TimeoutError:
            free = {str(n.get("NodeManagerAddress")): n.get("Resources", {}).get("CPU", 0) for n in nodes}
            raise WorkerError(f"--ray: the cluster found no room in {PLACEMENT_TIMEOUT_S:.0f} s for "
                              f"{len(bundles)} bundles of {bundles[0]['CPU']:g} CPU ({self._strategy}); CPUs by "
                              f"node: {free}") from None
        self.requested = count
        return count

    def _new_worker(self, share: Share, index: int) -> WorkerLink:
        return RayWorkerLink(share, index, bundle=index % self._bundles)

    async def _spawn(self, worker: WorkerLink) -> None:
        assert isinstance(worker, RayWorkerLink)
        strategies = importlib.import_module("ray.util.scheduling_strategies")
        remote = self._ray.remote(WorkerActor).options(
            num_cpus=1, max_concurrency=4, max_restarts=0, max_task_retries=0,
            scheduling_strategy=strategies.PlacementGroupSchedulingStrategy(
                self._group, placement_group_bundle_index=worker.bundle))
        worker.table = np.zeros((len(worker.share.rows), NCOLS), dtype=np.int64)
        worker.actor = remote.remote(self._spec(worker))
        self._actors.append(worker.actor)

    async def _follow(self, worker: WorkerLink) -> None:
        """Poll one actor until it hands in its outcome, fails, or is lost."""
        assert isinstance(worker, RayWorkerLink)
        ray = self._ray
        how = ""
        try:
            worker.identity = await asyncio.wait_for(self._await(worker.actor.identity.remote()),
                                                     ACTOR_START_TIMEOUT_S)
            if worker.identity.get("version") != __version__:
                how = (f"its node runs fastbench {worker.identity.get('version')}, the driver {__version__}: "
                       "install the same on every node")
            else:
                self._node_of(worker)
            while not how and not self._killed:
                report = await self._call(worker.actor.poll.remote())
                worker.last_heard_ns = now_ns()
                self._take(worker, report)
                if report["failed"] is not None:
                    how = f"failed: {report['failed']}"
                elif report["done"]:
                    outcome = await asyncio.wait_for(self._await(worker.actor.outcome.remote()), OUTCOME_TIMEOUT_S)
                    worker.outcome = self._on_driver_clock(worker, outcome)
                    return
                else:
                    await asyncio.sleep(REPORT_INTERVAL_S)
        except asyncio.TimeoutError:
            how = "stopped answering" if worker.identity else f"did not answer in {ACTOR_START_TIMEOUT_S:g} s"
        except ray.exceptions.RayError as exc:
            how = f"died ({type(exc).__name__}: {_first_line(exc)})"
        if self._killed:  # the run failed and its actors were killed: nothing to report, and no stop to send
            return  # (a Ray call after the driver let go of Ray would join a cluster again: Ray's auto-init)
        worker.lost_ns, worker.lost_how = now_ns(), how
        if self._all_ready is not None and not self._all_ready.done():
            self._all_ready.set_exception(WorkerError(f"--ray: {worker.name()} could not start: {how}"))
            return
        self.stop("worker lost")

    def _take(self, worker: RayWorkerLink, report: dict[str, Any]) -> None:
        if report["ready"] and not worker.ready:
            worker.ready = True
            if all(w.ready for w in self._workers) and self._all_ready is not None and not self._all_ready.done():
                self._all_ready.set_result(None)
        if report["progress"] is not None:
            worker.take_progress(report["progress"])
            self._judge_error_rate()
        if report.get("stopping"):
            self.stop(report["stopping"])
        index, rows = report["rows"]
        if len(index) and worker.table is not None:
            worker.table[index] = shift_rows(rows, worker.offset_ns)

    def _on_driver_clock(self, worker: RayWorkerLink, outcome: WorkerOutcome) -> WorkerOutcome:
        data = outcome.data
        worker.table = shift_rows(data.rows, worker.offset_ns)
        data.rows = np.zeros((0, NCOLS), dtype=np.int64)
        data.start_ns -= worker.offset_ns
        data.end_ns -= worker.offset_ns
        return outcome

    def _node_of(self, worker: RayWorkerLink) -> None:
        node_id = str(worker.identity.get("node_id"))
        if node_id not in self._nodes:
            self._nodes[node_id] = _Node(node_id, str(worker.identity.get("host")),
                                         same_kernel=worker.identity.get("boot_id") == boot_id() != "")

    async def _before_start(self) -> None:
        """Each node's clock offset, from one of its workers (every worker is warm and idle now)."""
        first: dict[str, RayWorkerLink] = {}
        for worker in self._workers:
            assert isinstance(worker, RayWorkerLink)
            first.setdefault(str(worker.identity.get("node_id")), worker)
        for node_id, worker in first.items():
            node = self._nodes[node_id]
            try:
                estimate, node.clock_fallback = await asyncio.to_thread(self._sample_clock, worker, node)
            except Exception as exc:  # without its offset, none of its stamps can be set beside the others'
                raise WorkerError(f"--ray: the clock offset of node {node_id[:12]} on {node.host} is unknown: "
                                  f"reading its clock failed ({_first_line(exc)})") from None
            node.estimate = estimate
            node.same_clock = node.same_kernel and estimate.agrees_with(0)
            node.offset_ns = 0 if node.same_clock else estimate.offset_ns
        for worker in self._workers:
            assert isinstance(worker, RayWorkerLink)
            node = self._nodes[str(worker.identity.get("node_id"))]
            worker.offset_ns, worker.skew_offset_ns = node.offset_ns, node.skew_offset_ns

    async def _clocks_after(self) -> None:
        """Each node's offset estimated again once the window is over, from one of its workers that
        finished: the offset applied was estimated before it, and two hosts' clocks drift apart (tens
        of ppm without NTP: ms over a minute). The result records both; validate widens by the move."""
        first: dict[str, RayWorkerLink] = {}
        for worker in self._workers:
            if isinstance(worker, RayWorkerLink) and worker.outcome is not None:
                first.setdefault(str(worker.identity.get("node_id")), worker)
        for node_id, worker in first.items():
            node = self._nodes.get(node_id)
            if node is None or node.estimate is None:
                continue
            with contextlib.suppress(Exception):  # only a record: the run's figures are in already
                node.estimate_after, node.clock_fallback_after = await asyncio.to_thread(
                    self._sample_clock, worker, node)

    def _sample_clock(self, worker: RayWorkerLink, node: _Node) -> tuple[ClockOffset, str | None]:
        """The node's offset by UDP to the worker's clock responder, else by Ray calls to the worker;
        with why UDP was not used (None when it was)."""
        ip, port = (worker.identity.get("clock_udp") or [None, "its actor gave no UDP clock address"])[:2]
        if ip is None:
            why = str(port)
        else:
            node.clock_udp = f"{ip}:{port}"
            try:
                return udp_offset(str(ip), int(port)), None
            except (NoUdpReply, OSError) as exc:
                why = str(exc) or type(exc).__name__
        return self._ray_call_offset(worker.actor), why

    def _ray_call_offset(self, actor: Any) -> ClockOffset:
        samples = []
        for _ in range(CLOCK_SAMPLES):
            sent = now_ns()
            remote = int(self._ray.get(actor.clock.remote(), timeout=LOST_AFTER_S))
            samples.append(ClockSample(sent, remote, now_ns()))
        return estimate_offset(samples, method="ray-call")

    async def _call(self, ref: Any) -> Any:
        return await asyncio.wait_for(self._await(ref), LOST_AFTER_S)

    @staticmethod
    def _await(ref: Any) -> Awaitable[Any]:
        return asyncio.wrap_future(ref.future())

    def _kill_all(self) -> None:
        self._killed = True
        for actor in self._actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)

    async def _reap(self) -> None:
        """Every actor ended, the placement group let go, and the connection closed if it was opened here."""
        if self._ray is None:
            return
        if not self._killed:  # the run ended as planned: its actors still answer
            await self._clocks_after()
        self._kill_all()
        for worker in self._workers:  # nothing is sent to them any more (see _follow)
            if isinstance(worker, RayWorkerLink):
                worker.actor = None
        if self._group is not None:
            placement = importlib.import_module("ray.util.placement_group")
            with contextlib.suppress(Exception):
                placement.remove_placement_group(self._group)
        if self._connected_here:
            await asyncio.to_thread(self._ray.shutdown)

    # -- the result --------------------------------------------------------------------------------------

    def _chosen(self) -> dict[str, Any]:
        if self.per_node is not None:
            return {"how": "ray per node", "nodes": self._bundles, "per_node": self.per_node}
        return {"how": "ray spread", "workers": self.total}

    def _section(self, parts: list[Part], end_ns: int) -> dict[str, Any]:
        section = super()._section(parts, end_ns)
        section["process"] = "Ray actors (fastbench.load.rayworker.WorkerActor), one event loop and native core each"
        for worker, entry in zip(self._workers, section["per_worker"], strict=True):
            assert isinstance(worker, RayWorkerLink)
            entry["node"] = worker.identity.get("node_id")
            entry["host"] = worker.identity.get("host")
            if entry["lost"] is not None:
                entry["lost"]["last_heard_s"] = ((worker.last_heard_ns - self._start_ns) / 1e9
                                                 if worker.last_heard_ns else None)
                entry["lost"]["worker"] = worker.name()
        section["ray"] = {
            "address": self.address,
            "placement": {"strategy": self._strategy, "bundles": self._bundles, "workers_per_node": self.per_node},
            "nodes": [{"node": node.node_id, "host": node.host, "same_clock": node.same_clock,
                       "offset_ns": node.offset_ns, "uncertainty_ns": node.uncertainty_ns,
                       "skew_offset_ns": node.skew_offset_ns,
                       "estimate": node.estimate.as_dict() if node.estimate is not None else None,
                       "estimate_after": node.estimate_after.as_dict() if node.estimate_after is not None else None,
                       "clock_udp": node.clock_udp, "clock_fallback": node.clock_fallback,
                       "clock_fallback_after": node.clock_fallback_after,
                       "workers": [w.index for w in self._workers
                                   if isinstance(w, RayWorkerLink) and w.identity.get("node_id") == node.node_id]}
                      for node in self._nodes.values()],
        }
        return section


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
