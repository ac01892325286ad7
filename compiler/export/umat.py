"""``modelc export umat``: an Abaqus-style UMAT (``NAME_umat.c``, self-contained) and its layout
(``NAME_umat.json``: ``props`` in PROPS order, ``statev`` as ``[name, components]`` in STATEV order).

The Voigt <-> Mandel conversions are derived here from :mod:`modelc.runtime.mandel` (the one place
that knows the sqrt 2 factors and the Abaqus component order) by applying its functions to unit
vectors and matrices, and are emitted as the nonzero terms only (each is a permutation times a
diagonal scaling)::

    Mandel strain  e_m = sum_a V2M_strain[a, m] * (STRAN + DSTRAN)[a]
    Voigt stress   STRESS[a] = sum_m M2V_stress[m, a] * S_m
    DDSDDE[a, b]   = sum_{r, c} coef[a, b, r, c] * C_rc      (ssr4_to_voigt is linear in C)
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from modelc.errors import InputError
from modelc.export.c_interface import CONVENTIONS
from modelc.export.model import STRAIN, STRESS, Exported
from modelc.export.render import c_comment, template, write_files
from modelc.runtime.driver import OLD_TEMPERATURE, TEMPERATURE  # TEMP + DTEMP and TEMP in the UMAT

CUTBACK = 0.5  # PNEWDT asked for when a point does not converge
TIME, OLD_TIME, OLD_STRAIN = "forces/t", "old_forces/t", "old_forces/E"


def _terms(matrix: torch.Tensor) -> list[tuple[int, int, float]]:
    return [(int(i), int(k), float(matrix[i, k])) for i, k in torch.nonzero(matrix.abs() > 0).tolist()]


def conversions() -> dict[str, list[tuple[int, ...]]]:
    """The conversion terms, from modelc.runtime.mandel (Abaqus order, engineering shear)."""
    from modelc.runtime import mandel

    eye = torch.eye(6, dtype=torch.float64)
    strain = mandel.voigt_to_sr2(eye, "strain", "abaqus")   # row a: Mandel of Voigt unit a
    stress = mandel.sr2_to_voigt(eye, "stress", "abaqus")   # row m: Voigt of Mandel unit m
    stress_in = mandel.voigt_to_sr2(eye, "stress", "abaqus")
    tangent = []
    for r in range(6):
        for c in range(6):
            unit = torch.zeros(6, 6, dtype=torch.float64)
            unit[r, c] = 1.0
            D = mandel.ssr4_to_voigt(unit, "stiffness", "abaqus")
            tangent += [(a, b, r, c, f) for a, b, f in _terms(D)]
    return {"strain": _terms(strain), "stress": _terms(stress), "stress_in": _terms(stress_in),
            "tangent": tangent}


#: STATEV's last slot for a model that declares initial values (the spec's ``initial:``): 0 until the
#: UMAT has run at the point (Abaqus starts STATEV at zero), then 1
INITIALIZED = "modelc/initialized"


def statev_layout(m: Exported) -> list[tuple[str, str, int]]:
    """``(state output, old_state input, components)`` in STATEV order; ``state/S`` is not in STATEV
    (the host's STRESS carries it). A model with declared initial values gets one more slot,
    ``(INITIALIZED, "", 1)``, last."""
    out = [(new, old, m.slot("inputs", old).size) for new, old in m.state if new != STRESS]
    return out + [(INITIALIZED, "", 1)] if m.initial else out


def _input_lines(m: Exported, conv) -> list[str]:
    layout = statev_layout(m)
    statev = {old: off for off, (_, old, _) in zip(_offsets(layout), layout)}
    initial = dict(m.initial)
    lines, handled = [], set()
    if initial:  # STATEV is Abaqus' zeros before the first increment: the declared values instead
        lines.append(f"const int mc_fresh = statev[{_offsets(layout)[-1]}] == 0.0;  /* {INITIALIZED} */")
    for v in m.inputs:
        o = v.offset
        if v.name in (STRAIN, OLD_STRAIN):
            src = "stran[{a}] + dstran[{a}]" if v.name == STRAIN else "stran[{a}]"
            lines += [f"x[{o + i}] = 0;" for i in range(6)]
            lines += [f"x[{o + mm}] += {f!r} * ({src.format(a=a)});" for a, mm, f in conv["strain"]]
        elif v.name == TIME:
            lines.append(f"x[{o}] = time[1] + *dtime;")
        elif v.name == OLD_TIME:
            lines.append(f"x[{o}] = time[1];")
        elif v.name in (TEMPERATURE, OLD_TEMPERATURE) and v.size == 1:
            lines.append(f"x[{o}] = *temp + *dtemp;" if v.name == TEMPERATURE else f"x[{o}] = *temp;")
        elif v.name == "old_" + STRESS:
            lines += [f"x[{o + i}] = 0;" for i in range(6)]
            lines += [f"x[{o + mm}] += {f!r} * stress[{a}];" for a, mm, f in conv["stress_in"]]
        elif v.name in initial:
            lines += [f"x[{o + i}] = mc_fresh ? {e} : statev[{statev[v.name] + i}];"
                      for i, e in enumerate(initial[v.name])]
        elif v.name in statev:
            lines += [f"x[{o + i}] = statev[{statev[v.name] + i}];" for i in range(v.size)]
        else:
            raise InputError(f"{m.spec}: model {m.name!r} has the input {v.name!r}, which a UMAT cannot "
                             f"provide (it provides {STRAIN}, {OLD_STRAIN}, {TIME}, {OLD_TIME}, the "
                             f"temperature {TEMPERATURE} and {OLD_TEMPERATURE} (Scalar) and the "
                             "old_state/... of the model's own state outputs)")
        handled.add(v.name)
    return lines


def _offsets(layout) -> list[int]:
    out, off = [], 0
    for _, _, n in layout:
        out.append(off)
        off += n
    return out


def _output_lines(m: Exported, conv) -> list[str]:
    s = m.slot("outputs", STRESS).offset
    lines = [f"stress[{a}] = 0;" for a in range(6)]
    lines += [f"stress[{a}] += {f!r} * y[{s + mm}];" for mm, a, f in conv["stress"]]
    layout = statev_layout(m)
    for off, (new, _, n) in zip(_offsets(layout), layout):
        if new == INITIALIZED:
            lines.append(f"statev[{off}] = 1;  /* {INITIALIZED} */")
            continue
        y0 = m.slot("outputs", new).offset
        lines += [f"statev[{off + i}] = y[{y0 + i}];  /* {c_comment(new)} */" if i == 0 else
                  f"statev[{off + i}] = y[{y0 + i}];" for i in range(n)]
    lines += [f"ddsdde[{k}] = 0;" for k in range(36)]
    # Fortran DDSDDE(a+1, b+1) lives at ddsdde[b * 6 + a]; j is row-major 6x6 (d S_r / d E_c)
    lines += [f"ddsdde[{b * 6 + a}] += {f!r} * j[{r * 6 + c}];" for a, b, r, c, f in conv["tangent"]]
    return lines


def umat_json(m: Exported) -> dict:
    layout = statev_layout(m)
    props = [v.name if v.size == 1 else f"{v.name}[{k}]" for v in m.parameters for k in range(v.size)]
    return {
        "model": m.name, "spec": m.spec, "spec_hash": m.spec_hash, "generator": f"modelc {m.version}",
        "props": props,
        "props_default": [None if v.default is None else float(v.default[k])
                          for v in m.parameters for k in range(v.size)],
        "statev": [[new, n] for new, _, n in layout],
        "nstatv": sum(n for _, _, n in layout),
        "ntens": 6, "voigt_order": ["11", "22", "33", "12", "13", "23"], "shear_strain": "engineering",
        "stress": "Cauchy", "ddsdde": "d STRESS / d STRAN (Voigt, engineering shear), column-major",
        "pnewdt_on_failure": CUTBACK, "state_conventions": {k: CONVENTIONS[k] for k in ("SR2", "Scalar")},
    }


def export_umat(m: Exported, out_dir: str | Path) -> list[Path]:
    """Write ``NAME_umat.c`` and ``NAME_umat.json`` into ``out_dir``."""
    conv = conversions()
    info = umat_json(m)
    ctx = {"name": c_comment(m.name), "symbol": m.symbol, "spec": c_comment(m.spec),
           "spec_hash": m.spec_hash, "version": m.version, "nx": m.nx, "ny": m.ny, "np": m.np,
           "nstatv": info["nstatv"], "cutback": repr(CUTBACK), "point_code": m.point_code,
           "props_text": c_comment(", ".join(info["props"]) or "(none)"),
           "statev_text": c_comment(", ".join(f"{n} ({k})" for n, k in info["statev"]) or "(none)"),
           "input_lines": _input_lines(m, conv), "output_lines": _output_lines(m, conv),
           "initialized": info["nstatv"] if m.initial else 0}
    return write_files(out_dir, {f"{m.symbol}_umat.c": template("umat.c.j2").render(ctx),
                                 f"{m.symbol}_umat.json": json.dumps(info, indent=2) + "\n"})
