"""`modelc info`: what this machine gives each backend, and how the C backend builds and calls its
kernels here (compiler, flags, vector width, threads, the streaming-store threshold, the cache).

The C backend's choices depend on the machine: ``-march=native`` and what it means, OpenMP, the
512-bit builds of large blocks on AVX-512, and from how many bytes moved per call the outputs go out
with streaming stores (half the largest cache Linux reports, counted as at most 8 MiB: a virtual
machine may report its host's whole L3). This prints them, with the settings that override each
(``$CC``, ``$MODELC_CFLAGS``, ``$MODELC_C_LANES``, ``$MODELC_C_STREAM_BYTES``), so a slow or odd
result can be traced to the build. ``--json`` prints the same as one JSON object. Nothing is
written; the compiler is probed (a few small builds, ~1 s).
"""
from __future__ import annotations

import argparse
import json
import os
import platform

import torch


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def c_backend() -> dict:
    """The C backend here: ``{"available": False, "why": ...}``, or its compiler, flags, instruction
    sets, lanes, threads and streaming threshold."""
    from modelc.runtime import cbuild

    try:
        cc = cbuild.compiler()
        lanes = cbuild.default_lanes()
        stream = cbuild.stream_bytes()
    except cbuild.CBuildError as exc:
        return {"available": False, "why": str(exc)}
    isa = cbuild.instruction_sets(cc)
    return {
        "available": True,
        "compiler": cc.path,
        "version": cc.version,
        "flags": list(cc.flags),
        "newton_flags": list(cc.newton_flags),
        "wide_flags": list(cc.wide_flags),
        "instruction_sets": isa,
        "openmp": "-fopenmp" in cc.flags,
        "threads": torch.get_num_threads(),
        "lanes": lanes or "the source's (float64: 8, 16 on AVX-512 for a Newton solve; float32: 16, 32 on "
                          "AVX-512 for a Newton solve, 16 for a system when large blocks get 512-bit vectors)",
        "stream_bytes": stream,
        "stream_bytes_from": "$MODELC_C_STREAM_BYTES" if os.environ.get("MODELC_C_STREAM_BYTES") else
        f"half the largest cache Linux reports ({_mib(cbuild.reported_cache_bytes())}), counted as at most "
        f"{_mib(cbuild.STREAM_CACHE_CAP)}",
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n else "none reported"


def triton_backend() -> dict:
    from modelc.runtime.model import interpreting

    try:
        import triton
    except ImportError:
        return {"available": False, "why": "the triton package is not installed (Linux: pip install 'modelc[gpu]')"}
    info = {"version": getattr(triton, "__version__", "?"), "interpreter": interpreting()}
    if torch.cuda.is_available():
        info.update(available=True, device=torch.cuda.get_device_name(0))
    elif interpreting():
        info.update(available=True, device="none: kernels run under TRITON_INTERPRET=1 (slow; for tests)")
    else:
        why = "this torch has no CUDA support" if torch.version.cuda is None else "no CUDA device is visible"
        info.update(available=False, why=why)
    return info


def gather() -> dict:
    from modelc import __version__
    from modelc.runtime.paths import cache_folder

    return {
        "modelc": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "cache": str(cache_folder()),
        "backends": {"c": c_backend(), "triton": triton_backend(),
                     "torch": {"available": True, "device": "cuda" if torch.cuda.is_available() else "cpu"}},
    }


def text(info: dict) -> str:
    b = info["backends"]
    lines = [f"modelc {info['modelc']}, Python {info['python']}, torch {info['torch']}",
             f"machine: {info['machine']}", f"cache:   {info['cache']}", "", "backends (device='cpu' picks c, "
             "else torch; a CUDA device picks triton):"]
    c = b["c"]
    if c["available"]:
        lines += [f"  c       {c['version']} ({c['compiler']})",
                  f"          flags: {' '.join(c['flags'])}",
                  f"          instruction sets: {', '.join(c['instruction_sets']) or 'none detected'}; "
                  f"OpenMP: {'yes' if c['openmp'] else 'no (one thread)'}, {c['threads']} thread(s) "
                  "(torch.set_num_threads)",
                  f"          Newton sources add: {' '.join(c['newton_flags']) or '-'}; large blocks add: "
                  f"{' '.join(c['wide_flags']) or '- (no AVX-512, or $MODELC_CFLAGS sets the width)'}",
                  f"          points per block: {c['lanes']}",
                  f"          streaming stores above {c['stream_bytes'] / 2**20:g} MiB moved per call "
                  f"({c['stream_bytes_from']})"]
    else:
        lines.append(f"  c       unavailable: {c['why']}")
    t = b["triton"]
    lines.append(f"  triton  {t.get('version', '-')}: " + (t["device"] if t["available"] else f"unavailable: {t['why']}"))
    lines.append(f"  torch   {info['torch']}: always ({b['torch']['device']})")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    info = gather()
    print(json.dumps(info, indent=1) if args.json else text(info))
    return 0
