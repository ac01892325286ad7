"""Sharded runs over torch.distributed: many points (and parameter samples) on many devices.

Launched by ``torchrun`` (so by SLURM too), each process (*rank*) computes some *shards* of the run
on its own device (``cuda:LOCAL_RANK`` when CUDA is there, with NCCL; the CPU otherwise, with gloo)
and writes them into the results directory chunk by chunk of steps (:mod:`modelc.runtime.results`
describes the layout); nothing is gathered into one process. The work items are the history's
points, or with ``samples`` every (point, sample) pair, point-major; a shard is a contiguous range
of them. Every point is computed exactly as a single-process run computes it (the driver's step
loop, with the state carried from chunk to chunk), so the results equal that run's bit for bit.

Coordination goes through torch.distributed's rendezvous store (torchrun's): the plan, progress,
heartbeats, failures. A monitor thread per rank sees another rank's failure (on rank 0 also a
heartbeat stopped for ``timeout`` s) and stops its rank's work at once with :class:`RankFailed`
naming the rank and its error (torchrun also stops every rank when one exits). ``resume=True``
keeps complete shards and continues the others after their last complete chunk.
"""
from __future__ import annotations

import _thread
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time as _time
import warnings
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from modelc.runtime.errors import InputError, ModelcError
from modelc.runtime import driver
from modelc.runtime.history_chunks import HistorySource, open_history
from modelc.runtime.results import INDEX, Plan, Results, chunk_path, chunks_of, load, open_dir, save_npz, \
    shard_dir, write_atomic

__all__ = ["run_history", "RankFailed", "Context", "init", "device_for_rank"]

CHUNK_BYTES = 256 << 20  # default chunk: this much memory per rank for the chunk's results
POLL_S = 0.2


class RankFailed(ModelcError):
    """A rank of a distributed run failed (its error, or it stopped responding); the run ended."""


# ---------------------------------------------------------------------------------------------------
# The process group


@dataclass(frozen=True)
class Context:
    """This process's place in the run: ``rank`` of ``world``, its device, the rendezvous store
    (None for a single process) and whether this module created the process group."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    store: Any = None
    owns_group: bool = False


def device_for_rank() -> torch.device:
    """``cuda:LOCAL_RANK`` when CUDA is available, else the CPU."""
    if torch.cuda.is_available():
        return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}")
    return torch.device("cpu")


def init(timeout: float = 300.0) -> Context:
    """Join the run torchrun (or the environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    describes, creating the process group (NCCL on CUDA, else gloo) unless one exists; a single
    process when WORLD_SIZE is unset or 1."""
    import torch.distributed as dist

    device = device_for_rank()
    local = int(os.environ.get("LOCAL_RANK", 0))
    if dist.is_available() and dist.is_initialized():
        store = dist.distributed_c10d._get_default_store()
        return Context(dist.get_rank(), dist.get_world_size(), local, device, _prefixed(store), False)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Context(device=device)
    if not dist.is_available():
        raise InputError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    td = timedelta(seconds=timeout)
    store, rank, world = next(dist.rendezvous("env://", timeout=td))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=td)
    return Context(rank, world, local, device, _prefixed(store), True)


def _prefixed(store: Any) -> Any:
    """Our keys, apart from torchrun's and from an earlier attempt's (``--max-restarts``)."""
    import torch.distributed as dist

    return dist.PrefixStore(f"modelc/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/", store)


def _finish(ctx: Context) -> None:
    import torch.distributed as dist

    if ctx.owns_group and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------------
# Monitor: heartbeats, failures, progress (one thread per rank)


class _Monitor:
    """Beats this rank's heartbeat; watches for failures (any rank's report; on rank 0, heartbeats
    stopped for ``timeout`` s) and interrupts the main thread when one happens; on rank 0 shows the
    progress of all ranks."""

    def __init__(self, ctx: Context, timeout: float, show: Callable[[int], None] | None):
        self.ctx, self.timeout, self.show = ctx, timeout, show
        self.failure: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen = {r: (-1, _time.monotonic()) for r in range(ctx.world)}
        self._thread = threading.Thread(target=self._loop, name="modelc-monitor", daemon=True)
        self._old_handler: Any = None

    def __enter__(self) -> "_Monitor":
        if self.ctx.store is not None:
            if threading.current_thread() is threading.main_thread():
                # a simulated SIGUSR1 (never a real signal) stops the main thread's work mid-chunk
                self._old_handler = signal.signal(signal.SIGUSR1, self._on_interrupt)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._old_handler is not None:
            signal.signal(signal.SIGUSR1, self._old_handler)

    def stop(self) -> None:
        """No interrupt after this returns (this rank is failing or done)."""
        with self._lock:
            self._stop.set()

    def check(self) -> None:
        """Raise :class:`RankFailed` when another rank failed (between chunks, for runs off the
        main thread, where no interrupt reaches)."""
        if self.failure is not None:
            raise RankFailed(f"the run stopped on rank {self.ctx.rank}: {self.failure}")

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        if not self._stop.is_set():
            self.check()

    def _loop(self) -> None:
        store, rank = self.ctx.store, self.ctx.rank
        while not self._stop.wait(POLL_S):
            try:
                store.add(f"hb/{rank}", 1)
                if int(store.add("errors", 0)):
                    self._fail(self._first_error())
                    return
                if rank == 0:
                    stale = self._stale()
                    if stale is not None:
                        msg = (f"rank {stale} stopped responding (no heartbeat for {self.timeout:g} s: "
                               f"killed, out of memory, or its node lost)")
                        report(self.ctx, msg)
                        self._fail(msg)
                        return
                    if self.show is not None:
                        self.show(int(store.add("progress", 0)))
            except Exception as exc:  # the store is gone: the launcher or rank 0's node went away
                if not self._stop.is_set():
                    self._fail(f"lost the rendezvous store ({type(exc).__name__}: {exc}); the launcher "
                               f"or rank 0 is gone")
                return

    def _stale(self) -> int | None:
        now = _time.monotonic()
        for r in range(self.ctx.world):
            if r == self.ctx.rank or self.ctx.store.check([f"done/{r}"]):
                continue
            beats = int(self.ctx.store.add(f"hb/{r}", 0))
            last, since = self._seen[r]
            if beats != last:
                self._seen[r] = (beats, now)
            elif now - since > self.timeout:
                return r
        return None

    def _first_error(self) -> str:
        for r in range(self.ctx.world):
            if self.ctx.store.check([f"error/{r}"]):
                return self.ctx.store.get(f"error/{r}").decode()
        return "another rank failed"

    def _fail(self, msg: str) -> None:
        with self._lock:
            if not self._stop.is_set():
                self.failure = msg
                if self._old_handler is not None:  # the main thread runs the handler next
                    _thread.interrupt_main(signal.SIGUSR1)

    # Waits poll (a blocking store call could not be interrupted): a failure ends them through the
    # monitor's interrupt.
    def wait(self, key: str, count: int) -> None:
        """Until counter ``key`` reaches ``count``."""
        while int(self.ctx.store.add(key, 0)) < count:
            self.check()
            _time.sleep(POLL_S / 4)

    def wait_key(self, key: str) -> None:
        """Until ``key`` is set."""
        while not self.ctx.store.check([key]):
            self.check()
            _time.sleep(POLL_S / 4)


def report(ctx: Context, message: str) -> None:
    """Publish this rank's failure to the others (and to torchrun's error summary)."""
    text = f"rank {ctx.rank} of {ctx.world} ({socket.gethostname()}): {message}"
    if ctx.store is not None:
        try:
            if not ctx.store.check([f"error/{ctx.rank}"]):
                ctx.store.set(f"error/{ctx.rank}", text)
                ctx.store.add("errors", 1)
        except Exception:  # the store may be gone already; torchrun still reports the exit
            pass
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path and not os.path.exists(path):  # torchrun prints it as this rank's root cause
        info = {"message": {"message": text, "extraInfo": {"py_callstack": text,
                                                             "timestamp": str(int(_time.time()))}}}
        Path(path).write_text(json.dumps(info))


class _Progress:
    """Point-steps done, on rank 0 for all ranks: a tqdm bar on a terminal, else a line every
    ``every`` seconds (logs of batch jobs)."""

    def __init__(self, total: int, enabled: bool, desc: str, every: float = 30.0):
        self.total, self.enabled, self.desc, self.every = total, enabled, desc, every
        self.bar, self.last, self.start = None, 0, _time.monotonic()
        self._printed = self.start
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit="pt-step", unit_scale=True, file=sys.stderr,
                            leave=False)

    def __call__(self, done: int) -> None:
        if not self.enabled or done == self.last:
            return
        if self.bar is not None:
            self.bar.update(done - self.last)
        elif _time.monotonic() - self._printed >= self.every:
            self._printed = _time.monotonic()
            print(f"{self.desc}: {100 * done / max(self.total, 1):.0f}% ({done} of {self.total} "
                  f"point-steps, {self._printed - self.start:.0f} s)", file=sys.stderr, flush=True)
        self.last = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ---------------------------------------------------------------------------------------------------
# The run


def run_history(model: Any, history: Any, out: "str | os.PathLike[str]", *,
                params: Mapping[str, Any] | None = None, samples: Mapping[str, Any] | None = None,
                dtype: torch.dtype | None = None, tangent_steps: Any = None,
                chunk_steps: int | None = None, shards: int | None = None, resume: bool = False,
                progress: bool = True, timeout: float = 60.0) -> Results:
    """Drive ``model`` through ``history`` (an ``.npz`` path, a directory of ``.npy`` files, or a
    mapping), sharded over the ranks of a torchrun launch (one process without one), writing the
    results into the directory ``out``; returns them (:func:`modelc.runtime.results.load`) on every
    rank.

    ``params``: overrides, each a number or one value per point (as in the single-process driver).
    ``samples``: ``{name: values}`` with one value per sample (all of one length S; or a parameter
    given as ``TypedTensor(values, "Scalar", batch_names=("samples",))``): every point
    runs once per sample; results are shaped (steps, points, samples, ...). ``chunk_steps``: steps per
    chunk (default: what fits in 256 MiB per rank). ``shards``: how many (default: one per rank).
    ``resume``: continue the run already in ``out``. ``timeout``: seconds without a heartbeat after
    which a rank counts as dead (and the limit on the rendezvous and collectives).
    """
    ctx = init(max(timeout, 30.0))
    try:
        show = _Progress(0, progress and ctx.rank == 0, driver._model_name(model))
        with _Monitor(ctx, timeout, show) as mon:
            try:
                return _run(ctx, mon, show, model, history, Path(out), params, samples, dtype,
                            tangent_steps, chunk_steps, shards, resume)
            except RankFailed:
                mon.stop()
                raise
            except BaseException as exc:  # this rank's own failure: the others hear of it
                mon.stop()
                report(ctx, f"{type(exc).__name__}: {exc}")
                raise
            finally:
                show.close()
    finally:
        _finish(ctx)


def _run(ctx: Context, mon: _Monitor, show: _Progress, model: Any, history: Any, out: Path,
         params: Mapping[str, Any] | None, samples: Mapping[str, Any] | None, dtype: torch.dtype | None,
         tangent_steps: Any, chunk_steps: int | None, shards: int | None, resume: bool) -> Results:
    src = open_history(history)
    dtype = dtype or getattr(model, "dtype", None) or torch.float64
    outs = driver.variable_shapes(model, "output")
    named = {k for k, v in (params or {}).items() if getattr(v, "batch_names", None) == ("samples",)}
    samples = _samples({**(samples or {}), **{k: params[k] for k in named}})  # TypedTensor(..., ("samples",))
    params = {k: v for k, v in (params or {}).items() if k not in named}
    if ctx.rank == 0:
        plan = _plan(ctx, model, src, out, params, samples, dtype, tangent_steps, chunk_steps, shards,
                     resume, outs)
        if ctx.store is not None:
            ctx.store.set("plan", plan.to_json())
    else:
        mon.wait_key("plan")
        plan = Plan.from_json(ctx.store.get("plan").decode(), "the run's plan")
    show.total = (plan.steps - 1) * plan.work
    mine = [i for i in range(len(plan.shards)) if i % ctx.world == ctx.rank]
    for i in mine:
        if not (shard_dir(out, i) / "shard.json").is_file():
            _run_shard(ctx, mon, show, model, src, plan, i, out, params, samples, dtype, list(outs))
    if ctx.store is None:
        return _complete(out, plan)
    ctx.store.set(f"done/{ctx.rank}", "1")
    ctx.store.add("done", 1)
    mon.wait("done", ctx.world)
    if ctx.rank == 0:
        show(int(ctx.store.add("progress", 0)))
        _complete(out, plan)
        ctx.store.add("final", 1)
    mon.wait("final", 1)
    return load(out)


def _complete(out: Path, plan: Plan) -> Results:
    """Rank 0, all shards written: the summary over all of them, and the index marked complete."""
    plan = replace(plan, complete=True)
    plan = replace(plan, summary=open_dir(out, plan).summary())
    write_atomic(out / INDEX, plan.to_json().encode())
    return load(out)


def _samples(samples: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for name, v in (samples or {}).items():
        a = np.asarray(getattr(v, "data", v), dtype=np.float64)
        if a.ndim != 1 or a.size == 0 or not np.isfinite(a).all():
            raise InputError(f"samples '{name}': expected a non-empty 1-D array of finite numbers, got "
                             f"shape {a.shape}")
        out[name] = a
    sizes = {a.size for a in out.values()}
    if len(sizes) > 1:
        raise InputError(f"samples: every parameter needs one value per sample, got lengths "
                         f"{', '.join(f'{k}={a.size}' for k, a in out.items())}")
    return out


def _fingerprint(src: HistorySource, params: Mapping[str, Any] | None, samples: Mapping[str, np.ndarray],
                 model: str, dtype: torch.dtype, tangent_steps: tuple[int, ...]) -> str:
    h = hashlib.sha256(src.fingerprint().encode())
    for k in sorted(params or {}):
        h.update(k.encode() + np.ascontiguousarray(np.asarray(params[k], dtype=np.float64)).tobytes())
    for k in sorted(samples):
        h.update(b"sample:" + k.encode() + samples[k].tobytes())
    h.update(f"{model}|{dtype}|{tangent_steps}".encode())
    return h.hexdigest()


def _plan(ctx: Context, model: Any, src: HistorySource, out: Path, params: Mapping[str, Any] | None,
          samples: Mapping[str, np.ndarray], dtype: torch.dtype, tangent_steps: Any,
          chunk_steps: int | None, shards: int | None, resume: bool,
          outs: Mapping[str, tuple[int, ...]]) -> Plan:
    """Rank 0: the run's plan, new (written to ``out/index.json``) or, resuming, the one there."""
    name = driver._model_name(model)
    t_steps = tuple(driver._tangent_steps(tangent_steps, src.steps))
    for k in samples:
        if k in (params or {}):
            raise InputError(f"parameter '{k}' is given both as an override and as samples")
    driver._params(model, {**(params or {}), **{k: v[0] for k, v in samples.items()}}, src.batch, dtype,
                   torch.device("cpu"))  # names and sizes checked before any rank starts
    fp = _fingerprint(src, params, samples, name, dtype, t_steps)
    index = out / INDEX
    if index.is_file():
        if not resume:
            raise InputError(f"{out}: holds the results of a run already ({INDEX}); pass --resume "
                             f"(resume=True) to continue it, or choose another output directory")
        plan = Plan.from_json(index.read_text(), str(index))
        if plan.fingerprint != fp:
            raise InputError(f"{out}: --resume, but the run there had another history, parameters, "
                             f"samples, model, dtype or tangent steps ({plan.model}, {plan.dtype}, "
                             f"history {plan.history})")
        return replace(plan, complete=False, summary="")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: exists and is not an empty directory; the results of a distributed "
                         f"run go into a directory of their own")
    n_samples = len(next(iter(samples.values()))) if samples else 1
    work = src.batch * n_samples
    n = max(1, min(int(shards or ctx.world), work))
    bounds = [work * i // n for i in range(n + 1)]
    if chunk_steps is None:
        per_row = 8 * (sum(int(np.prod(s, dtype=np.int64)) for s in outs.values()) + 12) * 4
        chunk_steps = CHUNK_BYTES // max(1, per_row * (bounds[1] - bounds[0]))
    chunk_steps = int(max(1, min(int(chunk_steps), src.steps - 1)))
    aliases = driver._aliases(outs)  # variable name -> the key the driver stores it under
    plan = Plan(model=name, dtype=str(dtype).replace("torch.", ""), steps=src.steps, points=src.batch,
                history=src.source, fingerprint=fp, shards=tuple(zip(bounds[:-1], bounds[1:])),
                chunk_steps=chunk_steps, tangent_steps=t_steps, aliases=aliases,
                samples={k: tuple(float(x) for x in v) for k, v in samples.items()},
                strain_per_item=bool(samples) and "control" in src.optional)
    write_atomic(index, plan.to_json().encode())
    return plan


def _run_shard(ctx: Context, mon: _Monitor, show: _Progress, model: Any, src: HistorySource, plan: Plan, i: int,
               out: Path, params: Mapping[str, Any] | None, samples: Mapping[str, np.ndarray],
               dtype: torch.dtype, outs: list[str]) -> None:
    """Shard ``i``: its chunks of steps in order, each continuing from the previous one's state."""
    start = _time.perf_counter()
    a, b = plan.shards[i]
    pa, pb = plan.point_range(i)
    items = np.arange(a, b)
    point_of = items // plan.n_samples - pa  # work item -> column of the points the shard covers
    sample_of = items % plan.n_samples
    gather = bool(samples) and (len(point_of) != pb - pa or np.any(point_of != np.arange(pb - pa)))
    call = {k: _shard_param(v, pa, pb, point_of, src.batch) for k, v in (params or {}).items()}
    call.update({k: v[sample_of] for k, v in samples.items()})
    done = chunks_of(out, i)
    carry, failed = _recover(done, outs, a, plan.aliases)
    row = done[-1][1] if done else 0
    labels = src.labels(slice(pa, pb))
    while row < plan.steps:
        mon.check()
        lo, r0 = row, max(row - 1, 0)
        hi = min(plan.steps, max(lo, 1) + plan.chunk_steps)
        whole = src.chunk(r0, hi, slice(pa, pb))  # the shard's points; its work items may repeat them
        hist = whole.take(point_of) if gather else whole
        t_local = [t - r0 for t in plan.tangent_steps if r0 < t < hi]
        with warnings.catch_warnings():  # the summary over all ranks says it, once
            warnings.simplefilter("ignore", driver.NonConvergenceWarning)
            res = driver.run_history(model, hist, params=call or None, dtype=dtype, progress=False,
                                     tangent_steps=t_local or None, initial=carry)
        for p, s in res.failed.items():
            failed[a + p] = r0 + s
        keep = lo - r0  # the carried row 0 belongs to the previous chunk
        arrays = {plan.aliases.get(k, k): res[k][keep:] for k in (*outs, "converged", "iterations", "residual_norm")}
        arrays["time"] = whole.time[keep:]  # per point (with samples too)
        # the strain solved for where stress-controlled (per work item with samples: each solves its own)
        arrays["strain"] = res["strain"][keep:] if not gather or plan.strain_per_item else whole.strain[keep:]
        if whole.temperature is not None:
            arrays["temperature"] = whole.temperature[keep:]
        if "control" in src.optional:  # as a single process stores a mixed run's (zero in a chunk without)
            rows = (whole.steps - keep, whole.batch)
            arrays["control"] = whole.control[keep:] if whole.control is not None else np.zeros((*rows, 6), bool)
            arrays["control_iterations"] = res["control_iterations"][keep:] if hist.mixed else \
                np.zeros(rows, np.int64)
        if plan.tangent_steps:
            tan = res["tangent"] if t_local else np.zeros((0, b - a, 6, 6), res[driver.STRESS].dtype)
            arrays["tangent"] = tan
        if lo == 0:
            arrays["labels"] = labels
        save_npz(chunk_path(out, i, lo, hi), arrays)
        carry = res.carry(outs)
        _add_progress(ctx, show, (hi - 1 - r0) * (b - a))
        row = hi
    work = np.array(sorted(failed), dtype=np.int64)
    save_npz(shard_dir(out, i) / "failed.npz",
             {"work": work, "step": np.array([failed[w] for w in work.tolist()], dtype=np.int64)})
    info = {"shard": i, "range": [a, b], "rank": ctx.rank, "world": ctx.world,
            "device": str(getattr(model, "device", ctx.device)),
            "failed": len(failed), "seconds": round(_time.perf_counter() - start, 3)}
    write_atomic(shard_dir(out, i) / "shard.json", json.dumps(info).encode())


def _shard_param(value: Any, pa: int, pb: int, point_of: np.ndarray, batch: int) -> Any:
    """A parameter override cut to a shard: a number as is; one value per point, the shard's."""
    a = np.asarray(getattr(value, "data", value), dtype=np.float64) if not torch.is_tensor(value) \
        else value.detach().cpu().double().numpy()
    if a.ndim == 1 and a.size == batch and batch > 1:
        return a[pa:pb][point_of]
    return value


def _recover(done: list[tuple[int, int, Path]], outs: list[str], first: int,
             aliases: Mapping[str, str]) -> tuple[driver.Carry | None, dict[int, int]]:
    """Resuming a shard: the state after its last complete chunk, and the failures so far."""
    if not done:
        return None, {}
    failed: dict[int, int] = {}
    for lo, _, p in done:
        with np.load(p) as f:
            conv = f["converged"]
        for w in np.flatnonzero(~conv.all(axis=0)).tolist():
            failed.setdefault(first + w, lo + int(np.argmin(conv[:, w])))
    with np.load(done[-1][2]) as f:
        carry = driver.Carry({n: f[aliases.get(n, n)][-1] for n in outs}, f["converged"][-1].copy(),
                             f["strain"][-1].copy())
    return carry, failed


def _add_progress(ctx: Context, show: _Progress, n: int) -> None:
    if ctx.store is None:
        show(show.last + n)
    else:
        ctx.store.add("progress", n)
