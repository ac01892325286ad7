"""modelc.export.model: ``VarSlot``'s JSON form, ``Exported``'s sizes and look-ups, and ``prepare`` on small
specs: the flat layouts and state pairs it reports (by hand), its per-point C code built alone and called
through ctypes against closed forms (an explicit model, and an implicit one whose tangent comes from the
implicit-function theorem), the choice of model, and the error for a model that is not a stress update."""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest

import modelc
from modelc.errors import InputError, ModelcError
from modelc.export.model import Exported, VarSlot, c_symbol, prepare

EXPLICIT = """
models:
  lin:
    doc: a linear stress update
    parameters:
      K: {default: 3.0, units: MPa, doc: bulk}
      G: {type: SR2, default: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}
    inputs:
      eps: {var: forces/E, type: SR2}
      t: {var: forces/t}
    outputs:
      S: {var: state/S, type: SR2}
      ep: {var: state/ep}
    equations:
      S: K*eps + t*G
      ep: old(ep) + t
"""

# S + a tr(S) I = K eps, so S = K (eps - a/(1 + 3a) tr(eps) I) and dS/dE = K (I6 - a/(1 + 3a) 1 1^T)
# (Sherman-Morrison on I6 + a 1 1^T, with 1 = (1, 1, 1, 0, 0, 0) the Mandel identity)
IMPLICIT = """
models:
  imp:
    parameters:
      K: {default: 2.0}
      a: {default: 1.0}
    inputs:
      eps: {var: forces/E, type: SR2}
    implicit:
      unknowns:
        S: {var: state/S, type: SR2}
      residuals:
        S: S + a*tr(S)*I2 - K*eps
"""

WRAPPERS = """
void w_value(const double *x, const double *p, double *y, double *st) { point_value(x, p, y, 0, st); }
void w_tangent(const double *x, const double *p, double *y, double *j, double *st)
{ point_derivative(x, p, y, j, st); }
"""


def _spec(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def _build(tmp_path: Path, e: Exported) -> ctypes.CDLL:
    """The point code alone (no Python, no other file) with two exported wrappers, as a shared library."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler: the exports need one"
    (tmp_path / "point.c").write_text(e.point_code + WRAPPERS)
    r = subprocess.run([cc, "-O1", "-fPIC", "-shared", "point.c", "-o", "libpoint.so", "-lm"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return ctypes.CDLL(str(tmp_path / "libpoint.so"))


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


def test_varslot_json_has_parameter_fields_only_when_there_are_some():
    assert VarSlot("forces/E", "SR2", 0, 6).as_json() == {"name": "forces/E", "type": "SR2", "offset": 0,
                                                         "size": 6}
    assert VarSlot("K", "Scalar", 1, 1, (3.0,), "MPa", "bulk").as_json() == {
        "name": "K", "type": "Scalar", "offset": 1, "size": 1, "default": [3.0], "units": "MPa", "doc": "bulk"}
    assert VarSlot("nu", "Scalar", 2, 1, None, "", "Poisson").as_json() == {
        "name": "nu", "type": "Scalar", "offset": 2, "size": 1, "default": None, "units": "", "doc": "Poisson"}


def test_exported_sizes_and_lookups():
    e = Exported(name="m", symbol="m", spec="s.yaml", spec_hash="0" * 64, implicit=False,
                 inputs=(VarSlot("forces/E", "SR2", 0, 6), VarSlot("forces/t", "Scalar", 6, 1)),
                 outputs=(VarSlot("state/S", "SR2", 0, 6),),
                 parameters=(VarSlot("K", "Scalar", 0, 1), VarSlot("C", "SSR4", 1, 36)),
                 state=(), point_code="")
    assert (e.nx, e.ny, e.np) == (7, 6, 37)
    assert e.slot("inputs", "forces/t") == VarSlot("forces/t", "Scalar", 6, 1)
    assert e.has("parameters", "C") and not e.has("inputs", "C") and not e.has("outputs", "forces/E")
    with pytest.raises(KeyError, match="forces/x"):
        e.slot("inputs", "forces/x")
    assert e.version == modelc.__version__


def test_prepare_reports_the_layouts_by_hand(tmp_path):
    path = _spec(tmp_path, EXPLICIT)
    e = prepare(path)
    assert (e.name, e.symbol, e.spec, e.implicit) == ("lin", "lin", str(path), False)
    # the inputs: forces/E (6), forces/t (1), then the previous value old(ep) adds old_state/ep
    assert e.inputs == (VarSlot("forces/E", "SR2", 0, 6), VarSlot("forces/t", "Scalar", 6, 1),
                        VarSlot("old_state/ep", "Scalar", 7, 1))
    assert e.outputs == (VarSlot("state/S", "SR2", 0, 6), VarSlot("state/ep", "Scalar", 6, 1))
    assert e.parameters == (VarSlot("K", "Scalar", 0, 1, (3.0,), "MPa", "bulk"),
                            VarSlot("G", "SR2", 1, 6, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)))
    assert (e.nx, e.ny, e.np) == (8, 7, 7)
    assert e.state == (("state/ep", "old_state/ep"),)  # a state output fed back as its old_ input
    assert len(e.spec_hash) == 64 and int(e.spec_hash, 16) >= 0
    changed = prepare(_spec(tmp_path, EXPLICIT.replace("t*G", "2*t*G"), "t.yaml"))
    assert changed.spec_hash != e.spec_hash


def test_explicit_point_code_gives_the_closed_form_and_its_tangent(tmp_path):
    e = prepare(_spec(tmp_path, EXPLICIT))
    lib = _build(tmp_path, e)
    rng = np.random.default_rng()
    x, p = rng.normal(size=e.nx), rng.uniform(0.5, 2.0, size=e.np)
    K, G, eps, t, old_ep = p[0], p[1:7], x[0:6], x[6], x[7]
    y, j, st = np.full(e.ny, np.nan), np.full(36, np.nan), np.zeros(3)
    lib.w_value(_ptr(x), _ptr(p), _ptr(y), _ptr(st))
    np.testing.assert_allclose(y, np.r_[K * eps + t * G, old_ep + t], rtol=1e-14, atol=1e-14)
    y[:] = np.nan
    lib.w_tangent(_ptr(x), _ptr(p), _ptr(y), _ptr(j), _ptr(st))
    np.testing.assert_allclose(y, np.r_[K * eps + t * G, old_ep + t], rtol=1e-14, atol=1e-14)
    np.testing.assert_allclose(j.reshape(6, 6), K * np.eye(6), rtol=1e-14, atol=0)  # every entry written


def test_implicit_point_code_solves_and_differentiates_through_the_solve(tmp_path):
    e = prepare(_spec(tmp_path, IMPLICIT))
    assert e.implicit and e.state == (("state/S", "old_state/S"),)  # the default guess reads old(S)
    assert [v.name for v in e.inputs] == ["forces/E", "old_state/S"] and e.nx == 12 and e.np == 2
    lib = _build(tmp_path, e)
    rng = np.random.default_rng()
    K, a = rng.uniform(1.0, 3.0), rng.uniform(0.1, 1.0)
    eps = rng.normal(size=6)
    x, p = np.r_[eps, np.zeros(6)], np.array([K, a])
    one = np.array([1.0, 1, 1, 0, 0, 0])
    c = a / (1 + 3 * a)
    y, j, st = np.full(6, np.nan), np.full(36, np.nan), np.zeros(3)
    lib.w_tangent(_ptr(x), _ptr(p), _ptr(y), _ptr(j), _ptr(st))
    assert st[0] == 1  # converged
    np.testing.assert_allclose(y, K * (eps - c * eps[:3].sum() * one), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(j.reshape(6, 6), K * (np.eye(6) - c * np.outer(one, one)), rtol=1e-12, atol=1e-12)


def test_prepare_picks_the_model(tmp_path):
    two = EXPLICIT + "  other:\n    inputs: {x: {var: forces/x}}\n    outputs: {y: {var: state/y}}\n" \
                     "    equations: {y: 2*x}\n"
    path = _spec(tmp_path, two)
    with pytest.raises(ModelcError, match=r"holds several models; pick one .*: lin, other"):
        prepare(path)
    assert prepare(path, "lin").name == "lin"
    with pytest.raises(ModelcError, match=r"no model or composition named 'lnn'; available: lin, other"):
        prepare(path, "lnn")
    composed = _spec(tmp_path, two + "compose:\n  both: {models: [lin, other]}\n", "c.yaml")
    e = prepare(composed)  # the spec's only composition
    assert e.name == "both" and e.has("outputs", "state/y") and e.has("outputs", "state/S")


def test_a_model_that_is_not_a_stress_update_is_refused(tmp_path):
    path = _spec(tmp_path, EXPLICIT.replace("var: state/S", "var: state/T"))
    with pytest.raises(InputError) as info:
        prepare(path)
    assert str(info.value) == (f"{path}: model 'lin' cannot be exported for a host code: it needs an output "
                               "'state/S' (stress) and an input 'forces/E' (strain); its outputs: state/T, "
                               "state/ep; its inputs: forces/E, forces/t, old_state/ep")
    path = _spec(tmp_path, EXPLICIT.replace("var: forces/E", "var: forces/F"), "f.yaml")
    with pytest.raises(InputError, match=r"its inputs: forces/F, forces/t, old_state/ep$"):
        prepare(path)


def test_c_symbol_keeps_the_name_unless_it_would_clash():
    """The export's C prefix is the model's name as the user wrote it (``B`` and ``n`` are no C
    clash: they used to become ``v_B``, ``v_n`` from the Python backends' reserved words); only a
    clash with the model's own C code adds ``_model``."""
    code = "static void point_value(void) {}\n#define MC_W 8\nstatic void newton_1(void) {}"
    assert [c_symbol(n, code) for n in ("B", "n", "mask", "lin", "j2-voce", "3d")] == \
        ["B", "n", "mask", "lin", "j2_voce", "m_3d"]
    assert c_symbol("point", code) == "point_model"  # point_value is the code's static function
    assert c_symbol("mc", code) == "mc_model" and c_symbol("MC", code) == "MC_model"  # MC_W
    assert c_symbol("newton", code) == "newton"  # newton_1 is no name the export defines


@pytest.mark.parametrize("name, symbol", [("B", "B"), ("point", "point_model")])
def test_a_model_named_like_internal_code_exports_and_builds(tmp_path, capsys, name, symbol):
    """``modelc export c`` of a model called ``B`` (a Python-side reserved word) or ``point`` (the
    exported C's own ``point_value``): the files build with the C compiler and the prefix is the
    one documented above."""
    from modelc.cli import main as cli_main

    path = _spec(tmp_path, EXPLICIT.replace("  lin:", f"  {name}:"))
    assert cli_main(["export", "c", str(path), "--out", str(tmp_path / "x")]) == 0
    assert f"{symbol}_value" in (tmp_path / "x" / f"{symbol}.h").read_text()
    cc = shutil.which("cc") or shutil.which("gcc")
    r = subprocess.run([cc, "-O0", "-fPIC", "-shared", f"{symbol}.c", "-o", "liby.so", "-lm"],
                       cwd=tmp_path / "x", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert hasattr(ctypes.CDLL(str(tmp_path / "x" / "liby.so")), f"{symbol}_tangent")
