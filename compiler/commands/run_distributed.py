"""`modelc run ... --distributed`: the run sharded over the ranks of a torchrun launch.

``torchrun --nproc-per-node K -m modelc run SPEC --model NAME --history H.npz --out DIR --distributed``
writes DIR (an index and one folder per shard, see :mod:`modelc.runtime.results`); rank 0 prints the
progress of all ranks, the convergence summary over all of them and (for up to 10,000 work items)
the results table. Without torchrun it runs as one process and writes the same directory. Exit status
as for a single-process run: 0 all converged, 1 some points did not (on rank 0; torchrun then
reports rank 0 exiting with 1), 2 bad input or a failed rank (its message names the rank).
"""
from __future__ import annotations

import argparse
import os
import time as _time
from pathlib import Path

from modelc.errors import InputError, ModelcError

__all__ = ["add_distributed_arguments", "main_distributed", "check_single"]

ONLY_DISTRIBUTED = ("resume", "chunk_steps", "shards", "samples", "timeout")


def add_distributed_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scale-out (torchrun; see docs/scale-out.md)")
    g.add_argument("--distributed", action="store_true",
                   help="shard the points (and samples) over the ranks of a torchrun launch; --out is "
                        "then a directory (read it with modelc.results.load)")
    g.add_argument("--resume", action="store_true",
                   help="continue the run in --out DIR: complete shards are kept, others continue "
                        "from their last complete chunk")
    g.add_argument("--chunk-steps", type=int, default=None, metavar="N",
                   help="steps per chunk read and written at once (default: what fits in 256 MiB)")
    g.add_argument("--shards", type=int, default=None, metavar="N",
                   help="number of shards (default: one per rank)")
    g.add_argument("--sample", dest="samples", action="append", default=[], metavar="NAME=V,V,...",
                   help="parameter samples: every point runs once per sample (repeatable; all of "
                        "one length); results are (steps, points, samples, ...)")
    g.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds without a heartbeat after which a rank counts as dead (default 60)")


def check_single(args: argparse.Namespace) -> None:
    """Scale-out options without --distributed are a mistake worth naming."""
    given = [o for o in ONLY_DISTRIBUTED if getattr(args, o) not in (None, False, [])]
    if given:
        flags = ", ".join("--" + ("sample" if o == "samples" else o.replace("_", "-")) for o in given)
        raise InputError(f"{flags}: only with --distributed (results in a directory)")


def main_distributed(args: argparse.Namespace) -> int:
    from modelc.commands.run import _torch_dtype, check_device, load_model, parse_sets, parse_steps, \
        results_table
    from modelc.runtime.distributed import RankFailed, device_for_rank, run_history

    params = parse_sets(args.sets)
    samples = {k: (v if hasattr(v, "shape") else [v]) for k, v in parse_sets(args.samples, "--sample").items()}
    tangent_steps = parse_steps(args.tangent_steps)
    if args.plot:
        raise InputError("--plot: not with --distributed; load the results with "
                         "modelc.results.load(DIR) and draw them with modelc.runtime.driver.plot_results")
    for name, value in (("--chunk-steps", args.chunk_steps), ("--shards", args.shards)):
        if value is not None and value < 1:
            raise InputError(f"{name} {value}: expected a positive number")
    if args.timeout is not None and not args.timeout > 0:
        raise InputError(f"--timeout {args.timeout}: expected a positive number of seconds")
    if args.device is None:
        device = str(device_for_rank())
    elif args.device == "cuda":  # each rank its own GPU
        check_device(args.device)
        device = str(device_for_rank())
    else:
        device = check_device(args.device)
    model = load_model(args.spec, args.model, dtype=args.dtype, device=device, backend=args.backend,
                       on_failure=args.on_failure)
    from modelc.commands.run import solver_options

    model.set_solver(**solver_options(args))  # every rank's every chunk (--rtol, --atol, --max-iter)
    start = _time.perf_counter()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    try:
        results = run_history(model, args.history, args.out, params=params, samples=samples,
                              dtype=_torch_dtype(args.dtype), tangent_steps=tangent_steps,
                              chunk_steps=args.chunk_steps, shards=args.shards, resume=args.resume,
                              progress=not args.no_progress, timeout=args.timeout or 60.0)
    except RankFailed:
        raise
    except ModelcError as exc:  # this rank's own error: say which rank it is
        raise RankFailed(f"rank {rank} of {world} failed: {exc}" if world > 1 else str(exc)) from None
    elapsed = _time.perf_counter() - start
    if rank != 0:
        return 0
    plan = results.plan
    name = args.model or plan.model or Path(args.spec).stem
    what = f"{plan.points} points" + (f" x {plan.n_samples} samples" if plan.samples else "")
    print(f"{name}: {plan.steps - 1} steps x {what} in {elapsed:.2f} s on {world} rank(s), "
          f"{len(plan.shards)} shard(s) ({args.dtype}, rank 0 on {device})")
    if not plan.samples and plan.work <= 10_000:
        print(results_table(results))
    print(results.summary())
    print(f"results: {args.out} (modelc.results.load)")
    return 0 if results.ok else 1
