"""The spec-language extensions the radial return needs:

- ``old(x)`` of a declared output (its previous value), in explicit and implicit models; reading the
  output itself is a located error;
- an implicit model with ``outputs`` + ``equations``: the outputs are computed from the solved
  unknowns (which are then internal: not outputs, no previous value, a guess is required), the
  models it ``uses`` see the outputs at the current iterate, and the derivatives go through the
  implicit-function theorem and the chain rule.

Oracles: closed forms (a backward-Euler step of ep' = H exp(-ep) solved by bisection to round-off,
its derivative by the implicit-function theorem written out by hand) and central differences.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

from fe_util import caret as _caret
from fe_util import write
from modelc.errors import SpecError
from modelc.frontend import load_spec
from modelc.interpret import interpret
from modelc.passes.compose import compose_spec_model
from modelc.passes.cse import cse
from modelc.passes.differentiate import differentiate
from modelc.passes.lower import lower

# ep = old(ep) + de, de = dt H exp(-ep): one scalar unknown de, outputs ep and the rate de/dt; the
# rate law is a used block that reads the *output* ep (at the current iterate inside the solve)
SPEC = """
models:
  rate:
    parameters: {H: {default: 10.0}}
    inputs: {ep: {var: state/internal/ep}}
    outputs: {r: {var: state/internal/ep_rate}}
    equations: {r: H*exp(-ep)}
  step:
    inputs:
      t: {var: forces/t}
      rate: {var: state/internal/ep_rate}
    define:
      dt: t - old(t)
    outputs:
      ep: {var: state/internal/ep}
      v: {var: state/internal/v}
    implicit:
      unknowns:
        de: {var: de}
      residuals:
        de: de - dt*rate
      guess: {de: 0}
      uses: [rate]
      solver: {rtol: 1.0e-14, atol: 1.0e-14}
    equations:
      ep: old(ep) + de
      v: de/dt
"""


def _program(tmp_path, text=SPEC, name="step"):
    spec = load_spec(write(tmp_path, text))
    return spec, cse(lower(differentiate(compose_spec_model(spec, name)), derivatives=True))


def _bisect(ep0: np.ndarray, dt: np.ndarray, H: float) -> np.ndarray:
    """The root of g(de) = de - dt H exp(-ep0 - de) (increasing) by bisection, to round-off."""
    lo, hi = np.zeros_like(ep0), dt * H * np.exp(-ep0)  # g(lo) <= 0 <= g(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        neg = mid - dt * H * np.exp(-ep0 - mid) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    return 0.5 * (lo + hi)


def test_implicit_model_with_outputs_solves_and_differentiates(tmp_path) -> None:
    spec, prog = _program(tmp_path)
    m = spec.model("step")
    assert [v.name for v in m.outputs] == ["state/internal/ep", "state/internal/v"]
    assert [v.name for v in m.implicit.unknowns] == ["de"]
    # the unknown is internal: not an output, no old value among the inputs
    assert [v.name for v in prog.outputs] == ["state/internal/ep", "state/internal/v"]
    assert sorted(v.name for v in prog.inputs) == ["forces/t", "old_forces/t", "old_state/internal/ep"]
    rng = np.random.default_rng(5)
    n = 7
    ins = {"forces/t": 1.0 + rng.uniform(0.01, 0.5, n), "old_forces/t": np.ones(n),
           "old_state/internal/ep": rng.uniform(0.0, 2.0, n)}
    H = float(rng.uniform(2.0, 20.0))
    res, der, status = interpret(prog, ins, {"H": H})
    assert status["converged"].all()
    dt = ins["forces/t"] - ins["old_forces/t"]
    de = _bisect(ins["old_state/internal/ep"], dt, H)
    np.testing.assert_allclose(res["state/internal/ep"], ins["old_state/internal/ep"] + de, rtol=1e-14)
    np.testing.assert_allclose(res["state/internal/v"], de / dt, rtol=1e-13)
    # implicit-function theorem by hand: g(de, ep0, t) = de - dt H exp(-ep0 - de) = 0
    e = H * np.exp(-ins["old_state/internal/ep"] - de)
    dg_dde, dg_dep0, dg_dt = 1 + dt * e, dt * e, -e
    dde_dep0, dde_dt = -dg_dep0 / dg_dde, -dg_dt / dg_dde
    d = {k: np.asarray(v).reshape(n) for k, v in der.items()}
    np.testing.assert_allclose(d[("state/internal/ep", "old_state/internal/ep")], 1 + dde_dep0, rtol=1e-13)
    np.testing.assert_allclose(d[("state/internal/ep", "forces/t")], dde_dt, rtol=1e-13)
    np.testing.assert_allclose(d[("state/internal/v", "forces/t")], dde_dt / dt - de / dt**2, rtol=1e-12)
    # and the same by central differences of the program itself
    h = 1e-6
    for name in ("forces/t", "old_state/internal/ep"):
        plus, minus = dict(ins), dict(ins)
        plus[name], minus[name] = ins[name] + h, ins[name] - h
        fd = (interpret(prog, plus, {"H": H})[0]["state/internal/v"]
              - interpret(prog, minus, {"H": H})[0]["state/internal/v"]) / (2 * h)
        np.testing.assert_allclose(d[("state/internal/v", name)], fd, rtol=1e-7, atol=1e-9)


def test_old_of_an_output_in_an_explicit_model(tmp_path) -> None:
    text = """
    models:
      accumulate:
        inputs: {r: {var: state/internal/rate}, t: {var: forces/t}}
        outputs: {ep: {var: state/internal/ep}}
        equations: {ep: old(ep) + (t - old(t))*r}
    """
    spec, prog = _program(tmp_path, text, "accumulate")
    assert [v.name for v in spec.model("accumulate").inputs] == [
        "state/internal/rate", "forces/t", "old_state/internal/ep", "old_forces/t"]
    res, der, _ = interpret(prog, {"state/internal/rate": np.array([2.0]), "forces/t": np.array([1.5]),
                                   "old_forces/t": np.array([1.0]), "old_state/internal/ep": np.array([0.25])}, {})
    assert res["state/internal/ep"][0] == 0.25 + 0.5 * 2.0
    assert np.asarray(der[("state/internal/ep", "old_state/internal/ep")]).item() == 1.0


def test_check_prints_unknowns_and_outputs(tmp_path) -> None:
    from modelc.commands.check import describe

    text = describe(load_spec(write(tmp_path, SPEC)))
    block = text[text.index("model step"):]
    assert "unknowns" in block and "outputs (from the solution)" in block
    assert re.search(r"R\(de\)\s+\d+", block) and re.search(r"state/internal/v\s+\d+", block)


# --------------------------------------------------------------------------------------------------
# misuse: located errors (file:line, the text, a caret under the offending part)


def _error(tmp_path, text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text))
    return info.value


def _line_of(text: str, needle: str) -> int:
    lines = text.lstrip("\n").split("\n")
    return next(i for i, line in enumerate(lines, 1) if needle in line)


def _variant(old: str, new: str) -> str:
    assert old in SPEC
    return SPEC.replace(old, new)


@pytest.mark.parametrize("old, new, message, caret, line", [
    # reading an output: its equation defines it
    ("v: de/dt", "v: de/dt + ep", "'ep' is an output of this model", "ep", "v: de/dt + ep"),
    ("de: de - dt*rate", "de: de - dt*rate + 0*ep", "'ep' is an output of this model", "ep",
     "de: de - dt*rate"),
    # ... also through a helper's argument
    ("      dt: t - old(t)\n", "      dt: t - old(t)\n      twice(x): 2*x\n", None, None, None),
    # the previous value of an internal unknown does not exist
    ("v: de/dt", "v: old(de)/dt", "old() of unknown 'de'", "de", "v: old(de)/dt"),
    # an output reading what a used model computes inside the solve
    ("v: de/dt", "v: rate", "reads 'state/internal/ep_rate', which used model 'rate' computes inside",
     None, "v: rate"),
])
def test_misuse_is_located(tmp_path, old, new, message, caret, line) -> None:
    if message is None:  # the helper case: pass an output to a helper
        text = _variant(old, new).replace("v: de/dt", "v: twice(ep)")
        message, caret, line = "'ep' is an output of this model", "ep", "v: twice(ep)"
    else:
        text = _variant(old, new)
    err = _error(tmp_path, text)
    assert message in str(err), str(err)
    assert f"s.yaml:{_line_of(text, line)}:" in str(err), str(err)
    if caret is not None:
        assert _caret(err) == caret, str(err)


def test_internal_unknown_needs_a_guess(tmp_path) -> None:
    text = _variant("      guess: {de: 0}\n", "")
    err = _error(tmp_path, text)
    assert "unknown 'de' of model 'step' needs a guess" in str(err)
    assert f"s.yaml:{_line_of(text, 'de: {var: de}')}:" in str(err)


def test_equations_without_outputs_in_an_implicit_model(tmp_path) -> None:
    text = _variant("""    outputs:
      ep: {var: state/internal/ep}
      v: {var: state/internal/v}
""", "")
    err = _error(tmp_path, text)
    assert "has 'equations' but no 'outputs'" in str(err)
    lines = text.lstrip("\n").split("\n")
    assert f"s.yaml:{lines.index('    equations:') + 1}:" in str(err)


def test_outputs_without_equations_in_an_implicit_model(tmp_path) -> None:
    text = SPEC[:SPEC.index("    equations:\n      ep:")]
    err = _error(tmp_path, text)
    assert "equations: no expression for 'ep'" in str(err)


def test_an_implicit_model_with_outputs_cannot_be_used(tmp_path) -> None:
    text = SPEC + """  wrapper:
    inputs: {x: {var: state/internal/v}}
    implicit:
      unknowns: {y: {}}
      residuals: {y: y - x}
      uses: [step]
"""
    err = _error(tmp_path, text)
    assert "uses 'step', which is implicit" in str(err)
    assert f"s.yaml:{_line_of(text, 'uses: [step]')}:" in str(err)
