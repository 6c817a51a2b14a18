"""Validator jobs spread over a Ray cluster: every GPU of a host, and hosts (issue 17).

``RayValidator(address, cache=..., device="auto"|"cpu")`` is a ``ValidatorClient``. It keeps one Ray
*actor* per GPU of the cluster (``num_gpus=1``; without GPUs, or with ``device="cpu"``, one per CPU slot
in interpreter mode). Each actor is a trusted side of its own: a ``LocalValidator`` with its own warm,
sandboxed worker pool and device lock (``pool.py``, ``device_lock.py``), so a job runs exactly as it does
in ``LocalValidator`` — same gates, sandbox, limits and result document — only in another process, on
another GPU or host. Ray places the actors and restarts a lost one; the client hands each job to an
actor with a free slot (the ``ray.util.ActorPool`` idea, thread-safe, so that the walker's and the
evaluation's threads submit side by side). With one job per actor (``jobs_per_actor=1``, the default) a
GPU runs one job at a time; with more, the jobs on one GPU share it as in one ``LocalValidator``
(checks side by side, every timed case alone). Jobs on different GPUs run at once; a timing job never
shares its GPU with another actor's job, because no two actors hold the same GPU.

**One result cache for the cluster.** The SQLite ``ResultCache`` stays a file on the driver's host; a
``ResultCacheActor`` pinned to that node is its one door. The client asks it before dispatching a job
(and answers from it), and every actor's ``LocalValidator`` asks it again before running and writes to it
only a complete result (``JobOutput.cacheable``), with the keys of today (``runner.cache_key`` through
``client.prepare_request``). Identical jobs in flight from one process share one run.

**Workloads travel with the job**: the top-level ``*.py``/``*.toml`` files of the workload folder are
sent along and written once per actor under its own folder, so hosts need no shared file system (the
keys hash the manifest and reference *contents*, so the copy keys like the original). Every host needs
KLineage, torch and triton installed, as for any Ray application.

**A lost job.** When the actor running a job dies (its process killed, its node lost: Ray's
``RayActorError``/``WorkerCrashedError``/``NodeDiedError``/``ObjectLostError``), nothing of that attempt
reached the cache (the write is the last step of a finished job, and one SQLite transaction). The job
is retried once, on another actor when there is one (the lost actor is restarted by Ray), and the
result of the retry records it: every requested gate's metrics carry ``ray_retries`` (1) and
``ray_lost`` (what happened to each lost attempt). A job lost a second time is not retried again: its
result fails (``the job ended before this gate ran``, with both losses named) and is never cached —
never a pass.

Ray is optional (the ``ray`` extra): importing this module does not import it; using it without Ray
installed raises ``ValidatorUnavailable`` naming the extra.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import socket
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from klineage.schema.gate_result import GATES, GateResult
from klineage.schema.ids import kernel_sha, sha256_text
from klineage.validator.cache import ResultCache, ResultStore
from klineage.validator.client import LocalValidator, PreparedRequest, ValidatorUnavailable, prepare_request
from klineage.validator.runner import ENDED, DeviceInfo, ValidationRequestError, assemble_gates
from klineage.validator.single_flight import SingleFlight

__all__ = ["RAY_MISSING", "RayValidator", "RemoteResultCache", "ResultCacheActor", "ValidatorActor",
           "WorkloadBundle", "bundle_workload", "import_ray", "shutdown_ray_validators"]

RAY_MISSING = ('the Ray backend needs Ray, which is not installed: pip install -e ".[ray]" in the KLineage '
               'checkout (the "ray" extra; "dev" includes it), or pip install "ray>=2.30"')
NAMESPACE = "klineage"
START_TIMEOUT_S = 180.0
CONNECT_PROBE_S = 5.0
MAX_BUNDLE_BYTES = 4 << 20
BUNDLE_SUFFIXES = (".py", ".toml")


def import_ray() -> Any:
    """The ``ray`` module, or ``ValidatorUnavailable`` naming the extra that installs it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ValidatorUnavailable(RAY_MISSING) from exc


def _lost_errors(ray: Any) -> tuple[type[BaseException], ...]:
    """Ray's ways of saying that the process running a job is gone (not that the job raised)."""
    ex = ray.exceptions
    return (ex.RayActorError, ex.WorkerCrashedError, ex.NodeDiedError, ex.ObjectLostError, ex.OutOfMemoryError)


# -- the workload, sent with the job ---------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadBundle:
    """A workload folder's top-level ``*.py``/``*.toml`` files, to be written again on another host."""

    name: str
    files: tuple[tuple[str, bytes], ...]

    @property
    def digest(self) -> str:
        """A hash of the name and every file: the folder an actor writes it to."""
        text = json.dumps([self.name, [(n, sha256_text(d.decode("latin-1"))) for n, d in self.files]])
        return sha256_text(text)[:24]


def bundle_workload(folder: Path | str) -> WorkloadBundle:
    """Read ``folder``'s top-level ``*.py``/``*.toml`` files (manifest, reference, kernels): what a job on
    another host needs to rebuild the workload byte for byte. Over 4 MiB is a request error."""
    path = Path(folder)
    files = []
    total = 0
    for file in sorted(path.iterdir()):
        if file.is_file() and file.suffix in BUNDLE_SUFFIXES:
            data = file.read_bytes()
            total += len(data)
            files.append((file.name, data))
    if total > MAX_BUNDLE_BYTES:
        raise ValidationRequestError(f"workload folder {str(path)!r} holds {total} bytes of *.py/*.toml files, "
                                     f"over the {MAX_BUNDLE_BYTES} bytes a Ray job carries", 413)
    return WorkloadBundle(name=path.resolve().name, files=tuple(files))


def _materialize(bundle: WorkloadBundle, root: Path) -> Path:
    """Write ``bundle`` under ``root`` once (atomically: a folder renamed into place) and return its folder."""
    final = root / bundle.digest / bundle.name
    if (final / "manifest.toml").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
    for name, data in bundle.files:
        (staging / name).write_bytes(data)
    try:
        staging.rename(final)
    except OSError:  # another thread wrote it first
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return final


# -- what travels to an actor and back ---------------------------------------------------------------------


@dataclass(frozen=True)
class RayJob:
    """One validation job as an actor receives it (already checked by the client)."""

    source: str
    workload: WorkloadBundle
    gates: tuple[str, ...]
    shapes: tuple[dict[str, int | bool], ...] | None
    seeds: int
    timing: dict[str, Any] | None
    timeout_s: float | None
    tag: str


@dataclass(frozen=True)
class JobReply:
    """An actor's answer: the result document, whether its cache answered it, and where it ran."""

    result: GateResult
    cached: bool
    pid: int
    node: str
    wall_s: float


# -- the shared result cache ---------------------------------------------------------------------------------


class ResultCacheActor:
    """The cluster's one door to the SQLite result cache on the driver's host (a Ray actor pinned there).

    Stores what it is given (``ResultCache.put`` is one transaction); the validators decide what may be
    stored (complete results only). Counts its reads, hits and writes (``stats``)."""

    def __init__(self, path: str) -> None:
        self.cache = ResultCache(path)
        self._lock = threading.Lock()
        self.counts = {"gets": 0, "hits": 0, "puts": 0}

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def get(self, key: str) -> GateResult | None:
        """The cached result for ``key``, or None."""
        hit = self.cache.get(key)
        self._count("gets")
        self._count("hits", hit is not None)
        return hit

    def put(self, key: str, result: GateResult) -> None:
        """Store a complete result under ``key``."""
        self.cache.put(key, result)
        self._count("puts")

    def get_ceilings(self, key: str) -> dict[str, Any] | None:
        """Stored device ceilings for ``key``, or None."""
        return self.cache.get_ceilings(key)

    def put_ceilings(self, key: str, ceilings: dict[str, Any]) -> None:
        """Store measured device ceilings under ``key``."""
        self.cache.put_ceilings(key, ceilings)

    def stats(self) -> dict[str, Any]:
        """Reads, hits and writes so far, the rows stored and the file."""
        with self._lock:
            counts = dict(self.counts)
        return {**counts, "rows": len(self.cache), "path": str(self.cache.path)}


class RemoteResultCache:
    """A ``ResultStore`` that reaches a ``ResultCacheActor``: what a validator on any host of the cluster
    (and the client) reads and writes the one cache through."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def _call(self, method: str, *args: Any) -> Any:
        ray = import_ray()
        return ray.get(getattr(self.handle, method).remote(*args))

    def get(self, key: str) -> GateResult | None:
        """The cached result for ``key``, or None."""
        result: GateResult | None = self._call("get", key)
        return result

    def put(self, key: str, result: GateResult) -> None:
        """Store a complete result under ``key``."""
        self._call("put", key, result)

    def get_ceilings(self, key: str) -> dict[str, Any] | None:
        """Stored device ceilings for ``key``, or None."""
        ceilings: dict[str, Any] | None = self._call("get_ceilings", key)
        return ceilings

    def put_ceilings(self, key: str, ceilings: dict[str, Any]) -> None:
        """Store measured device ceilings under ``key``."""
        self._call("put_ceilings", key, ceilings)

    def stats(self) -> dict[str, Any]:
        """The cache actor's counts (``ResultCacheActor.stats``)."""
        stats: dict[str, Any] = self._call("stats")
        return stats


# -- one trusted side per GPU ----------------------------------------------------------------------------------


class ValidatorActor:
    """One trusted side on one GPU (or CPU slot) of the cluster: ``LocalValidator``s over this process's
    warm worker pool and device lock, reading and writing the shared cache. A Ray actor (threaded: it
    answers ``where``/``running`` while a job runs)."""

    def __init__(self, cache_actor: str | None, device: str, max_timeout_s: float | None) -> None:
        ray = import_ray()
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        if gpu_ids and os.environ.get("CUDA_VISIBLE_DEVICES") != ",".join(gpu_ids):
            # Ray normally sets it; where told not to, this actor still sees only its own GPU (the workers
            # inherit CUDA_VISIBLE_DEVICES: sandbox.clean_env keeps CUDA_*)
            os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids)
        # the cache actor by name (not its handle): a restarted actor is rebuilt from inline arguments
        self.store: ResultStore | None = RemoteResultCache(ray.get_actor(cache_actor)) if cache_actor else None
        self.device = device
        self.max_timeout_s = max_timeout_s
        self.gpu_ids = gpu_ids
        self.node = str(ray.get_runtime_context().get_node_id())
        self.root = Path(tempfile.mkdtemp(prefix="klineage-ray-workloads-"))
        self._local = threading.local()
        self._lock = threading.Lock()
        self._running: dict[int, str] = {}
        self.jobs = 0

    def _validator(self, seeds: int, timing: Mapping[str, Any] | None) -> LocalValidator:
        """This thread's LocalValidator for these options (LocalValidator.last_cached is per instance)."""
        made: dict[str, LocalValidator] = self._local.__dict__.setdefault("validators", {})
        key = json.dumps([seeds, dict(timing) if timing else None], sort_keys=True)
        if key not in made:
            made[key] = LocalValidator(cache=self.store, device=self.device, seeds=seeds, timing=timing,
                                       max_timeout_s=self.max_timeout_s)
        return made[key]

    def validate(self, job: RayJob) -> JobReply:
        """Run one job as ``LocalValidator.validate`` does (its cache first; only a complete result written)."""
        import time

        folder = _materialize(job.workload, self.root)
        validator = self._validator(job.seeds, job.timing)
        me = threading.get_ident()
        with self._lock:
            self._running[me] = job.tag
        start = time.monotonic()
        try:
            result = validator.validate(job.source, folder, job.gates, job.shapes, timeout_s=job.timeout_s)
        finally:
            with self._lock:
                self._running.pop(me, None)
                self.jobs += 1
        return JobReply(result=result, cached=validator.last_cached, pid=os.getpid(), node=self.node,
                        wall_s=time.monotonic() - start)

    def device_info(self) -> DeviceInfo:
        """What this actor's workers run on (probed once per process)."""
        return self._validator(5, None).device_info()

    def ceilings(self) -> dict[str, Any] | None:
        """This GPU's copy bandwidth and bf16 GEMM rate (measured once, kept in the shared cache)."""
        return self._validator(5, None).ceilings()

    def where(self) -> dict[str, Any]:
        """This actor's process, node, host and GPUs."""
        return {"pid": os.getpid(), "node": self.node, "host": socket.gethostname(), "gpu_ids": self.gpu_ids,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": self.device}

    def running(self) -> list[str]:
        """Tags of the jobs running here now."""
        with self._lock:
            return sorted(self._running.values())

    def stats(self) -> dict[str, Any]:
        """Jobs run here, and this process's worker pool."""
        from klineage.validator.pool import default_pool

        return {"jobs": self.jobs, "pid": os.getpid(), "pool": default_pool().stats()}

    def shutdown(self) -> bool:
        """Kill this process's warm workers and baseline timers (before the actor is killed)."""
        import shutil

        from klineage.validator.baseline_timer import shutdown_baseline_timers
        from klineage.validator.pool import shutdown_default_pool

        shutdown_default_pool()
        shutdown_baseline_timers()
        shutil.rmtree(self.root, ignore_errors=True)
        return True


# -- the actors a process shares --------------------------------------------------------------------------------


def _check_reachable(address: str) -> None:
    """A ``HOST:PORT`` (or ``ray://HOST:PORT``) that does not accept a connection is refused here: Ray
    itself would wait for it for minutes."""
    bare = address.removeprefix("ray://")
    host, sep, port = bare.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return  # not HOST:PORT: left to Ray (it says what it expects)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_PROBE_S):
            pass
    except OSError as exc:
        raise ValidatorUnavailable(f"no Ray cluster answers at {address} ({exc}); start one with "
                                   "`ray start --head` on the head node, or give its address") from exc


def connect(address: str | None, runtime_env: Mapping[str, Any] | None = None) -> tuple[Any, bool]:
    """Ray, connected: the running connection when this process has one, else ``ray.init(address)``.

    ``address``: None (``$RAY_ADDRESS``, else a cluster started on this host, else a new local one),
    ``"auto"`` (an existing cluster on this host, or an error), ``"local"`` (a new one-host cluster),
    ``"HOST:PORT"`` (the head's GCS), or ``"ray://HOST:PORT"`` (Ray Client). Returns (ray, whether this
    call started the connection). Unreachable addresses raise ``ValidatorUnavailable``."""
    ray = import_ray()
    if ray.is_initialized():
        return ray, False
    if address not in (None, "auto", "local"):
        _check_reachable(str(address))
    try:
        ray.init(address=address, namespace=NAMESPACE, runtime_env=dict(runtime_env) if runtime_env else None,
                 include_dashboard=False, log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
        raise ValidatorUnavailable(f"cannot connect to the Ray cluster at {address or '$RAY_ADDRESS/local'}: "
                                   f"{exc}") from exc
    return ray, True


@dataclass
class _ActorSet:
    """The actors (and cache actor) that every RayValidator of this process with the same settings shares:
    two validators that differ only in timing options (the walker's candidate and baseline validators)
    never reserve the cluster's GPUs twice."""

    ray: Any
    actors: list[Any]
    on_gpu: bool
    jobs_per_actor: int
    cache: RemoteResultCache | None
    cache_actor: Any
    owns_connection: bool
    key: tuple[Any, ...]
    free: list[int] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    flights: SingleFlight[tuple[GateResult, bool]] = field(default_factory=SingleFlight)
    counts: dict[str, int] = field(default_factory=lambda: {"jobs": 0, "ran": 0, "cached": 0, "shared": 0,
                                                              "retried": 0, "lost": 0})
    lost_log: list[str] = field(default_factory=list)
    device: DeviceInfo | None = None
    closed: bool = False

    def acquire(self, avoid: int | None = None) -> int:
        """An actor with a free slot (the least busy; not ``avoid`` when another one exists)."""
        with self.cond:
            while True:
                if self.closed:
                    raise ValidatorUnavailable("this Ray validator was closed")
                order = sorted(range(len(self.actors)), key=lambda i: -self.free[i])
                pick = next((i for i in order if self.free[i] > 0 and (i != avoid or len(self.actors) == 1)), None)
                if pick is not None:
                    self.free[pick] -= 1
                    return pick
                self.cond.wait(timeout=1.0)

    def release(self, index: int) -> None:
        """Give back a slot of actor ``index``."""
        with self.cond:
            self.free[index] += 1
            self.cond.notify_all()

    def count(self, name: str, n: int = 1) -> None:
        with self.cond:
            self.counts[name] += n

    def close(self) -> None:
        """Stop every actor's workers, kill the actors and the cache actor; disconnect if we connected."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
        ray = self.ray
        with contextlib.suppress(Exception):
            ray.get([a.shutdown.remote() for a in self.actors], timeout=60)
        for handle in [*self.actors, self.cache_actor]:
            if handle is not None:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
        with _SETS_LOCK:
            _SETS.pop(self.key, None)
            last = not _SETS
        if self.owns_connection and last:
            with contextlib.suppress(Exception):
                ray.shutdown()


_SETS: dict[tuple[Any, ...], _ActorSet] = {}
_SETS_LOCK = threading.Lock()


def _cache_path(cache: ResultStore | Path | str | None) -> str | None:
    if cache is None:
        return None
    if isinstance(cache, Path | str):
        return str(Path(cache).resolve())
    if isinstance(cache, ResultCache):
        return str(cache.path.resolve())
    raise ValueError("RayValidator's cache must be a ResultCache or the path of its SQLite file")


def _start_set(address: str | None, cache_path: str | None, device: str, actors: int | None, jobs_per_actor: int,
               max_timeout_s: float | None, runtime_env: Mapping[str, Any] | None,
               start_timeout_s: float) -> _ActorSet:
    """Connect, start the cache actor on this node and one validator actor per GPU (or CPU slot)."""
    ray, owns = connect(address, runtime_env)
    resources = ray.cluster_resources()
    on_gpu = device == "auto" and int(resources.get("GPU", 0)) >= 1
    unit = "GPU" if on_gpu else "CPU"
    total = int(resources.get(unit, 0))
    count = actors or max(1, int(ray.available_resources().get(unit, 0)))  # default: every one free now
    if count > max(1, total):
        raise ValidationRequestError(f"asked for {count} Ray validator actors; the cluster has {total} {unit}s "
                                     "(one actor holds one)", 422)
    cache_actor = None
    cache = None
    name = ""
    if cache_path is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()
        # named for `ray list actors`; one per actor set (closing a set kills its own cache actor only)
        name = f"klineage-result-cache-{sha256_text(cache_path)[:12]}-{uuid.uuid4().hex[:8]}"
        cache_actor = ray.remote(ResultCacheActor).options(
            name=name, num_cpus=0, max_concurrency=32, max_restarts=-1, max_task_retries=-1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)).remote(cache_path)
        cache = RemoteResultCache(cache_actor)
    options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if on_gpu else 0, "max_restarts": -1,
                               "max_task_retries": 0, "max_concurrency": jobs_per_actor + 3}
    cache_name = name if cache_actor is not None else None
    handles = [ray.remote(ValidatorActor).options(**options).remote(cache_name, "auto" if on_gpu else "cpu",
                                                                    max_timeout_s)
               for _ in range(count)]
    try:
        ray.get([h.where.remote() for h in handles], timeout=start_timeout_s)
        if cache_actor is not None:
            ray.get(cache_actor.stats.remote(), timeout=start_timeout_s)
    except Exception as exc:
        for handle in [*handles, cache_actor]:
            if handle is not None:
                with contextlib.suppress(Exception):
                    ray.kill(handle, no_restart=True)
        raise ValidatorUnavailable(f"the Ray validator actors did not start within {start_timeout_s:g} s "
                                   f"({count} x {'1 GPU' if on_gpu else '1 CPU'} asked of {resources}): "
                                   f"{type(exc).__name__}: {exc}") from exc
    key = (address, cache_path, device, actors, jobs_per_actor, max_timeout_s)
    return _ActorSet(ray=ray, actors=handles, on_gpu=on_gpu, jobs_per_actor=jobs_per_actor, cache=cache,
                     cache_actor=cache_actor, owns_connection=owns, key=key, free=[jobs_per_actor] * count)


def shutdown_ray_validators() -> None:
    """Close every RayValidator actor set of this process (their actors, workers and the cache actor)."""
    with _SETS_LOCK:
        sets = list(_SETS.values())
    for actor_set in sets:
        actor_set.close()


# -- results of lost jobs ----------------------------------------------------------------------------------------


def record_retries(result: GateResult, wanted: Sequence[str], retries: int, lost: Sequence[str]) -> GateResult:
    """``result`` with ``ray_retries`` (attempts after the first) and ``ray_lost`` (what happened to each
    lost attempt) in the metrics of every requested gate."""
    extra = {"ray_retries": retries, "ray_lost": list(lost)}
    return replace(result, gates=tuple(replace(g, metrics={**g.metrics, **extra}) if g.gate in wanted else g
                                       for g in result.gates))


def lost_job_result(prepared: PreparedRequest, device: DeviceInfo, lost: Sequence[str]) -> GateResult:
    """The result of a job lost on every attempt: its first gate fails (``the job ended before this gate
    ran``, with the losses), the rest are skipped; never cached, never a pass."""
    source, workload, wanted, _, _ = prepared
    ended = (f"{ENDED}: the Ray worker running it was lost on each of its {len(lost)} attempt(s), not retried "
             f"again ({'; '.join(lost)})")
    gates, _ = assemble_gates({}, wanted, ended=ended)
    result = GateResult(kernel_sha=kernel_sha(source), gpu=device.gpu, versions=dict(device.versions), gates=gates,
                        workload=workload.name, date=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return record_retries(result, wanted, len(lost) - 1, lost)


# -- the client ----------------------------------------------------------------------------------------------------


class RayValidator:
    """A ``ValidatorClient`` whose jobs run on a Ray cluster (see the module docstring).

    ``address``: where the cluster is (``connect``: None, ``"auto"``, ``"local"``, ``"HOST:PORT"``,
    ``"ray://HOST:PORT"``); a process already connected to Ray uses that connection. ``cache``: the
    SQLite result cache on this host (a path or a ResultCache; None: none), shared by every actor through
    a ``ResultCacheActor``. ``device``: ``"auto"`` (one actor per GPU of the cluster; interpreter mode,
    one per CPU, when it has none) or ``"cpu"`` (interpreter mode). ``actors``: how many (default: every
    GPU, or every CPU, free when it starts). ``jobs_per_actor``: jobs one actor (one GPU) runs at once (default 1).
    ``timeout_s``, ``seeds``, ``timing``, ``max_timeout_s``: as for ``LocalValidator``. ``max_retries``:
    attempts after a lost one (1). Validators of one process with the same cluster settings share their
    actors (``timing`` and ``seeds`` travel with each job). ``close()`` ends them.
    """

    def __init__(self, address: str | None = None, cache: ResultStore | Path | str | None = None,
                 device: str = "auto", actors: int | None = None, jobs_per_actor: int = 1,
                 timeout_s: float | None = None, seeds: int = 5, timing: Mapping[str, Any] | None = None,
                 max_timeout_s: float | None = None, max_retries: int = 1,
                 runtime_env: Mapping[str, Any] | None = None, start_timeout_s: float = START_TIMEOUT_S) -> None:
        if device not in ("auto", "cpu"):
            raise ValueError("device must be 'auto' or 'cpu'")
        if jobs_per_actor < 1 or (actors is not None and actors < 1) or max_retries < 0:
            raise ValueError("actors and jobs_per_actor must be at least 1, max_retries at least 0")
        self.address = address
        self.timeout_s = timeout_s
        self.seeds = seeds
        self.timing = dict(timing) if timing else None
        self.max_retries = max_retries
        self._local = threading.local()
        path = _cache_path(cache)
        key = (address, path, device, actors, jobs_per_actor, max_timeout_s)
        with _SETS_LOCK:
            existing = _SETS.get(key)
            if existing is None or existing.closed:
                existing = _start_set(address, path, device, actors, jobs_per_actor, max_timeout_s, runtime_env,
                                      start_timeout_s)
                _SETS[key] = existing
        self._set = existing

    # -- what the cluster is ------------------------------------------------------------------------------
    @property
    def actors(self) -> list[Any]:
        """The validator actors' handles (one per GPU or CPU slot)."""
        return list(self._set.actors)

    @property
    def slots(self) -> int:
        """Jobs that run at once: actors x jobs per actor."""
        return len(self._set.actors) * self._set.jobs_per_actor

    @property
    def cache(self) -> RemoteResultCache | None:
        """The shared result cache (through its actor), or None."""
        return self._set.cache

    @property
    def last_cached(self) -> bool:
        """Whether this thread's last ``validate`` was answered without running a job."""
        return bool(getattr(self._local, "cached", False))

    @property
    def last_where(self) -> dict[str, Any] | None:
        """Where this thread's last job that reached an actor ran: actor index, pid, node, wall_s, attempts."""
        where: dict[str, Any] | None = getattr(self._local, "where", None)
        return where

    @property
    def stats(self) -> dict[str, int]:
        """Jobs asked, run, answered from the cache, shared with an identical one in flight, retried, lost."""
        with self._set.cond:
            return dict(self._set.counts)

    @property
    def lost_log(self) -> list[str]:
        """Every lost attempt so far (what Ray said)."""
        with self._set.cond:
            return list(self._set.lost_log)

    def device_info(self) -> DeviceInfo:
        """What the actors' workers run on (asked of the first actor once): the GPU and versions in every key."""
        if self._set.device is None:
            self._set.device = self._set.ray.get(self._set.actors[0].device_info.remote())
        return self._set.device

    def ceilings(self) -> dict[str, Any] | None:
        """The first actor's device ceilings (None without a GPU)."""
        if not self.device_info().cuda:
            return None
        ceilings: dict[str, Any] | None = self._set.ray.get(self._set.actors[0].ceilings.remote())
        return ceilings

    def where(self) -> list[dict[str, Any]]:
        """Each actor's process, node, host and GPUs."""
        return list(self._set.ray.get([a.where.remote() for a in self._set.actors]))

    # -- requests -------------------------------------------------------------------------------------------
    def prepare(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] | str | None,
                shapes: Any) -> PreparedRequest:
        """Check a request (raises ValidationRequestError) and return its parts and its cache key."""
        return prepare_request(candidate_source, workload_dir, gates, shapes, self.device_info(), self.seeds,
                               self.timing)

    def cached(self, key: str) -> GateResult | None:
        """The shared cache's result for a prepared request's key, if any."""
        return self._set.cache.get(key) if self._set.cache is not None else None

    def validate(self, candidate_source: str, workload_dir: Path | str, gates: Sequence[str] = GATES,
                 shapes: Sequence[Mapping[str, int | bool]] | None = None,
                 timeout_s: float | None = None) -> GateResult:
        """Validate on the cluster (see ValidatorClient); answered from the shared cache when possible, by
        the identical job when one is in flight from this process, else run on a free actor."""
        self._local.where = None
        prepared = self.prepare(candidate_source, workload_dir, gates, shapes)
        key = prepared[-1]
        actor_set = self._set
        actor_set.count("jobs")

        def answer() -> tuple[GateResult, bool]:
            hit = self.cached(key)
            if hit is not None:
                actor_set.count("cached")
                return hit, True
            return self._run(prepared, Path(workload_dir), timeout_s or self.timeout_s)

        (result, cached), shared = actor_set.flights.do(key, answer)
        if shared:
            actor_set.count("shared")
        self._local.cached = cached or shared
        return result

    def _run(self, prepared: PreparedRequest, workload_dir: Path, timeout_s: float | None) -> tuple[GateResult, bool]:
        """Send the job to a free actor; after a lost attempt, once more to another one."""
        source, workload, wanted, shapes, key = prepared
        ray, actor_set = self._set.ray, self._set
        job = RayJob(source=source, workload=bundle_workload(workload_dir), gates=wanted,
                     shapes=tuple(dict(s) for s in shapes) if shapes else None, seeds=self.seeds,
                     timing=self.timing if "performance" in wanted else None, timeout_s=timeout_s,
                     tag=f"{workload.name}:{sha256_text(source)[:12]}:{key[:12]}")
        lost: list[str] = []
        avoid: int | None = None
        for attempt in range(self.max_retries + 1):
            index = actor_set.acquire(avoid)
            try:
                reply: JobReply = ray.get(actor_set.actors[index].validate.remote(job))
            except _lost_errors(ray) as exc:
                what = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                lost.append(f"attempt {attempt + 1} on actor {index}: {type(exc).__name__}: {what}")
                with actor_set.cond:
                    actor_set.counts["lost"] += 1
                    actor_set.lost_log.append(f"{job.tag}: {lost[-1]}")
                avoid = index
                continue
            finally:
                actor_set.release(index)
            actor_set.count("cached" if reply.cached else "ran")
            self._local.where = {"actor": index, "pid": reply.pid, "node": reply.node, "wall_s": reply.wall_s,
                                 "attempts": attempt + 1}
            result = reply.result
            if lost:
                actor_set.count("retried")
                result = record_retries(result, wanted, len(lost), lost)
            return result, reply.cached
        return lost_job_result(prepared, self.device_info(), lost), False

    def close(self) -> None:
        """End the actors this validator shares with others of the same settings (and their workers)."""
        self._set.close()
