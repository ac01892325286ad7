"""``modelc export c``: a header, a C source, a layout file (``NAME.json``) and an ABI page
(``NAME.md``) for a model, over the C backend's batched code (see :mod:`modelc.export`)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from modelc.errors import InputError
from modelc.export.model import Exported
from modelc.export.render import c_comment, macro, template, write_files
from modelc.runtime.cbuild import STREAM_MAX_BYTES
from modelc.runtime.checks import Interval

CONVENTIONS = {
    "real": "double",
    "storage": "row-major, one row per point, contiguous",
    "SR2": "Mandel (xx, yy, zz, sqrt2*yz, sqrt2*xz, sqrt2*xy)",
    "SSR4": "6x6 Mandel matrix, row-major",
    "Scalar": "one value",
    "tangent": "d state/S / d forces/E, 6x6 Mandel, row-major per point",
    "status": "per point: converged (1/0), Newton iterations, residual norm",
}


def _vars(slots, with_param: bool = False) -> list[dict]:
    out, seen = [], {}
    for v in slots:
        d = {"name": v.name, "type": v.type, "offset": v.offset, "size": v.size, "macro": macro(v.name)}
        if d["macro"] in seen:  # two names, one C macro: the header would not compile
            raise InputError(f"export: {seen[d['macro']]!r} and {v.name!r} both become the C macro suffix "
                             f"{d['macro']!r}; rename one of them in the spec")
        seen[d["macro"]] = v.name
        if with_param:
            d["units"] = f" [{c_comment(v.units)}]" if v.units else ""
            d["units_text"] = v.units.replace("|", "\\|")
            d["doc"] = v.doc.replace("|", "\\|").replace("\n", " ")
            d["default_text"] = "required" if v.default is None else ", ".join(f"{x:g}" for x in v.default)
            d["bounds"] = v.bounds
        out.append(d)
    return out


def _advance(m: Exported) -> list[dict]:
    """The copies of ``NAME_advance``: old_state <- state (from y), old_forces <- forces (from x)."""
    copies = []
    for new, old in m.state:
        copies.append({"dst": m.slot("inputs", old).offset, "src": "yi",
                       "src_offset": m.slot("outputs", new).offset, "size": m.slot("inputs", old).size,
                       "what": f"{old} <- {new}"})
    for v in m.inputs:
        if v.name.startswith("old_forces/") and m.has("inputs", v.name[len("old_"):]):
            copies.append({"dst": v.offset, "src": "xi", "src_offset": m.slot("inputs", v.name[4:]).offset,
                           "size": v.size, "what": f"{v.name} <- {v.name[4:]}"})
    return copies


def _initial(m: Exported) -> list[dict]:
    """The writes of ``NAME_initial_state``: each old_state/... input with a declared initial value."""
    return [{"dst": m.slot("inputs", old).offset, "exprs": exprs, "what": c_comment(f"{old}: the spec's initial")}
            for old, exprs in m.initial]


def _defaults(m: Exported) -> list[str]:
    lines = []
    for v in m.parameters:
        for k in range(v.size):
            if v.default is None:
                lines.append(f"p[{v.offset + k}] = NAN; missing += {1 if k == 0 else 0};  /* {v.name}: required */")
            else:
                lines.append(f"p[{v.offset + k}] = {float(v.default[k])!r};  /* {c_comment(v.name)} */")
    return lines


def _checks(m: Exported) -> list[dict]:
    """Per parameter component: the C condition its value ``q[k]`` must meet (finite, and inside the
    spec's bounds when it declares them), as the runtime checks a call's parameters."""
    checks = []
    for v in m.parameters:
        iv = Interval.parse(v.bounds) if v.bounds else None
        for k in range(v.size):
            q = f"q[{v.offset + k}]"
            cond = [f"isfinite({q})"]
            if iv is not None and not math.isinf(iv.lo):
                cond.append(f"{q} {'>=' if iv.lo_closed else '>'} {iv.lo!r}")
            if iv is not None and not math.isinf(iv.hi):
                cond.append(f"{q} {'<=' if iv.hi_closed else '<'} {iv.hi!r}")
            checks.append({"column": v.offset + k, "cond": " && ".join(cond),
                           "what": c_comment(f"{v.name}{f' in {v.bounds}' if v.bounds else ''}")})
    return checks


def layout_json(m: Exported) -> dict:
    """The machine-readable layout (``NAME.json``)."""
    return {
        "model": m.name, "symbol": m.symbol, "spec": m.spec, "spec_hash": m.spec_hash,
        "generator": f"modelc {m.version}", "implicit": m.implicit,
        "nx": m.nx, "ny": m.ny, "np": m.np, "nt": 36,
        "inputs": [v.as_json() for v in m.inputs],
        "outputs": [v.as_json() for v in m.outputs],
        "parameters": [v.as_json() for v in m.parameters],
        "state": [{"state": new, "old_state": old} for new, old in m.state],
        "tangent": {"of": "state/S", "wrt": "forces/E", "shape": [6, 6]},
        "conventions": CONVENTIONS,
        "functions": {
            "value": f"int64_t {m.symbol}_value(int64_t n, const double *x, const double *p, int64_t p_stride, double *y, double *status)",
            "tangent": f"int64_t {m.symbol}_tangent(int64_t n, const double *x, const double *p, int64_t p_stride, double *y, double *dsde, double *status)",
            "default_parameters": f"int {m.symbol}_default_parameters(double *p)",
            "check_parameters": f"int {m.symbol}_check_parameters(int64_t rows, const double *p, int64_t p_stride)",
            "advance": f"void {m.symbol}_advance(int64_t n, double *x, const double *y)",
            "initial_state": f"int {m.symbol}_initial_state(int64_t n, double *x, const double *p, int64_t p_stride)",
        },
        "initial": [{"old_state": old, "declared": True} for old, _ in m.initial],
    }


def context(m: Exported) -> dict:
    return {"name": c_comment(m.name), "symbol": m.symbol, "SYMBOL": m.symbol.upper(),
            "spec": c_comment(m.spec), "spec_hash": m.spec_hash, "version": m.version,
            "nx": m.nx, "ny": m.ny, "np": m.np, "inputs": _vars(m.inputs), "outputs": _vars(m.outputs),
            "parameters": _vars(m.parameters, True), "state": list(m.state),
            "point_code": m.point_code, "block_code": m.block_code, "default_lines": _defaults(m),
            "checks": _checks(m),
            "advance": _advance(m), "initial": _initial(m), "input_offsets": [m.slot("inputs", n).offset for n in m.block_inputs],
            "implicit": m.implicit,
            "stream_bytes": STREAM_MAX_BYTES}


def export_c(m: Exported, out_dir: str | Path) -> list[Path]:
    """Write ``NAME.h``, ``NAME.c``, ``NAME.json`` and ``NAME.md`` into ``out_dir``."""
    ctx = context(m)
    return write_files(out_dir, {
        f"{m.symbol}.h": template("export_c.h.j2").render(ctx),
        f"{m.symbol}.c": template("export_c.c.j2").render(ctx),
        f"{m.symbol}.json": json.dumps(layout_json(m), indent=2) + "\n",
        f"{m.symbol}.md": template("export_abi.md.j2").render(ctx),
    })
