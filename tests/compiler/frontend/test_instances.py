"""Block instances (``instances:``), sums over them (``sums:``) and explicit parameter sharing
(``shared: true``): names, defaults, numbers through the passes and the reference interpreter against
a closed form, and every mistake as a located error (file:line, the offending text, a hint)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fe_util import caret, write
from modelc.errors import CompositionError, SpecError
from modelc.frontend import load_spec

BLOCK = """
models:
  decay:
    doc: X' = (a C N - g X) r
    parameters:
      C: {default: 10.0, bounds: "(0, inf)"}
      g: {default: 2.0}
      a: {shared: true, default: 0.5}
    inputs:
      r: {var: v/r}
      N: {var: v/N, type: SR2}
      X: {var: v/X, type: SR2}
    outputs:
      X_rate: {var: v/X_rate, type: SR2}
    equations:
      X_rate: (a*C*N - g*X)*r
  reader:
    parameters:
      a: {shared: true, default: 0.5}
    inputs:
      S: {var: v/S, type: SR2}
      X: {var: v/X, type: SR2}
    outputs:
      M: {var: v/M, type: SR2}
    equations:
      M: S - a*X
"""

INSTANCES = """
instances:
  kin1: {block: decay, suffix: 1, own: [v/X]}
  kin2: {block: decay, suffix: 2, own: [v/X], defaults: {C: 3.0, g: 7.0}, doc: the slow one}
sums:
  total: {var: v/X, over: [kin1, kin2]}
compose:
  two: {models: [kin1, kin2, total, reader], keep: [v/X]}
"""


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return load_spec(write(tmp_path_factory.mktemp("inst"), BLOCK + INSTANCES))


def test_an_instance_owns_its_parameters_and_variables(spec):
    k1, k2 = spec.model("kin1"), spec.model("kin2")
    assert [p.name for p in k1.parameters] == ["C1", "g1", "a"]
    assert [p.name for p in k2.parameters] == ["C2", "g2", "a"]
    assert [p.default for p in k2.parameters] == [(3.0,), (7.0,), (0.5,)]
    assert k2.parameters[0].bounds == "(0, inf)" and k2.doc == "the slow one" and k1.doc == "X' = (a C N - g X) r"
    assert [v.name for v in k1.inputs] == ["v/r", "v/N", "v/X1"]
    assert [v.name for v in k2.outputs] == ["v/X_rate2"]
    assert k1.loc.line != k2.loc.line  # each instance is located at its own line
    total = spec.model("total")
    assert [v.name for v in total.inputs] == ["v/X1", "v/X2"]
    assert [v.name for v in total.outputs] == ["v/X"]


def test_instances_compute_their_own_numbers(spec):
    """Through compose, differentiate, lower and the reference interpreter, against the closed form
    with fresh random inputs and parameters; the sum feeds the block that reads the total."""
    from modelc.interpret import interpret
    from modelc.passes.compose import compose_spec_model
    from modelc.passes.cse import cse
    from modelc.passes.differentiate import differentiate
    from modelc.passes.lower import lower

    m = compose_spec_model(spec, "two")
    assert sorted(p.name for p in m.parameters) == ["C1", "C2", "a", "g1", "g2"]
    prog = cse(lower(differentiate(m), derivatives=True))
    rng = np.random.default_rng(7)
    n = 5
    ins = {v.name: rng.standard_normal((n,) + tuple(v.type.base_shape)) for v in prog.inputs}
    par = {"C1": 4.0 + rng.random(), "g1": rng.random(), "C2": 1.0 + rng.random(), "g2": 3 * rng.random(),
           "a": rng.random()}
    res, der, _ = interpret(prog, ins, par)
    r, N = ins["v/r"][:, None], ins["v/N"]
    X1, X2 = ins["v/X1"], ins["v/X2"]
    np.testing.assert_allclose(res["v/X_rate1"], (par["a"] * par["C1"] * N - par["g1"] * X1) * r,
                               rtol=1e-14)
    np.testing.assert_allclose(res["v/X_rate2"], (par["a"] * par["C2"] * N - par["g2"] * X2) * r,
                               rtol=1e-14)
    np.testing.assert_allclose(res["v/X"], X1 + X2, rtol=1e-14)
    np.testing.assert_allclose(res["v/M"], ins["v/S"] - par["a"] * (X1 + X2), rtol=1e-14, atol=1e-15)
    # the chain rule through the sum: dM/dX2 = -a I
    np.testing.assert_allclose(der[("v/M", "v/X2")], np.broadcast_to(-par["a"] * np.eye(6),
                               (n, 6, 6)), atol=1e-15)


def test_the_library_chaboche_is_two_instances_of_one_block():
    spec = load_spec(write_path_library())
    for name, suffix in (("backstress1", "1"), ("backstress2", "2")):
        m = spec.model(name)
        assert [p.name for p in m.parameters] == ["C" + suffix, "g" + suffix]
        assert m.outputs[0].name == "state/internal/X_rate" + suffix
    assert [p.default for p in spec.model("backstress2").parameters] == [(2000.0,), (10.0,)]


def write_path_library():
    from fe_util import SPEC_DIR

    return SPEC_DIR / "library.yaml"


ERRORS = [
    ("  kin1: {block: decy, suffix: 1}", "unknown model 'decy'", "decy", "did you mean 'decay'"),
    ("  kin1: {block: decay, suffix: 1, own: [v/XX]}", "has no input 'v/XX' to own",
     "v/XX", "did you mean 'v/X'"),
    ("  kin1: {block: decay, suffix: 1, defaults: {Cc: 1.0}}", "block 'decay' has no parameter 'Cc'", "Cc",
     "did you mean 'C'"),
    ("  kin1: {block: decay, suffix: 1, defaults: {a: 1.0}}", "parameter 'a' is shared", "a", ""),
    ("  kin1: {block: decay, suffix: 1, defaults: {C: [1.0, 2.0]}}", "has 2 values, its type Scalar has 1",
     "[1.0, 2.0]", ""),
    ("  kin1: {block: decay, suffix: 1, defaults: {C: -1.0}}", "outside its bounds (0, inf)", "-1.0", ""),
    ("  kin1: {block: decay, suffix: a-b}", "'suffix' must be a name", "a-b", ""),
    ("  kin1: {block: decay}", "missing the required key 'suffix'", "{block: decay}", ""),
    ("  kin1: {block: decay, sufix: 1}", "unknown key 'sufix'", "sufix", "did you mean 'suffix'"),
    ("  reader: {block: decay, suffix: 1}", "instance 'reader' clashes with the model", "reader", ""),
]


@pytest.mark.parametrize("line,message,text,hint", ERRORS, ids=[e[1][:30] for e in ERRORS])
def test_instance_mistakes_are_located(tmp_path, line, message, text, hint):
    path = write(tmp_path, BLOCK + "instances:\n" + line + "\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    err = str(exc.value)
    assert message in err, err
    assert re.match(rf"{re.escape(str(path))}:{len((BLOCK + 'instances:').splitlines())}:\d+: error", err), err
    assert caret(exc.value).startswith(text), err  # a YAML list's text runs to the end of the line
    assert hint in err, err


SUM_ERRORS = [
    ("  total: {var: v/X, over: [kin1, decay]}", "'decay' is not an instance", "decay"),
    ("  total: {var: v/N, over: [kin1]}", "instance 'kin1' does not own 'v/N'", "kin1"),
    ("  total: {var: v/X, over: [kin1, kin1]}", "lists 'kin1' twice", "kin1"),
    ("  total: {var: v/X, over: []}", "'over' lists no instances", "[]"),
]


@pytest.mark.parametrize("line,message,text", SUM_ERRORS, ids=[e[1][:30] for e in SUM_ERRORS])
def test_sum_mistakes_are_located(tmp_path, line, message, text):
    head = BLOCK + "instances:\n  kin1: {block: decay, suffix: 1, own: [v/X]}\nsums:\n"
    path = write(tmp_path, head + line + "\n")
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    err = str(exc.value)
    assert message in err and f"{path}:{len(head.splitlines())}:" in err, err
    assert caret(exc.value).startswith(text), err


def test_sum_of_a_variable_not_owned_hints_at_own(tmp_path):
    head = BLOCK + "instances:\n  kin1: {block: decay, suffix: 1}\nsums:\n"
    with pytest.raises(SpecError, match="list it under own: of instance 'kin1'"):
        load_spec(write(tmp_path, head + "  total: {var: v/X, over: [kin1]}\n"))


# -- parameters never merge silently -----------------------------------------------------------------
TWO = """
models:
  first:
    parameters: {{C: {{{first}default: 1.0}}}}
    inputs: {{x: {{var: x}}}}
    outputs: {{y: {{var: y}}}}
    equations: {{y: C*x}}
  second:
    parameters:
      C: {{{second}default: {default}}}
    inputs: {{y: {{var: y}}}}
    outputs: {{z: {{var: z}}}}
    equations: {{z: C*y}}
compose:
  both: {{models: [first, second]}}
"""


def _compose_error(tmp_path, first: str, second: str, default: str = "1.0") -> str:
    from modelc.passes.compose import compose_spec_model

    path = write(tmp_path, TWO.format(first=first, second=second, default=default))
    spec = load_spec(path)
    with pytest.raises(CompositionError) as exc:
        compose_spec_model(spec, "both")
    return str(exc.value).replace(str(path), "s.yaml")


def test_two_declarations_of_one_parameter_are_a_located_error(tmp_path):
    err = _compose_error(tmp_path, "", "")
    assert err.startswith("s.yaml:9:7: error: composition 'both': parameter 'C' is declared by model 'first' "
                          "(at s.yaml:3:18) and by model 'second'"), err
    assert "neither does" in err and "\n    C\n    ^" in err and "shared: true" in err and "instances:" in err


def test_one_unmarked_declaration_is_named(tmp_path):
    err = _compose_error(tmp_path, "shared: true, ", "")
    assert "('second' does not)" in err, err


def test_shared_declarations_merge_and_must_agree(tmp_path):
    from modelc.passes.compose import compose_spec_model

    path = write(tmp_path, TWO.format(first="shared: true, ", second="shared: true, ", default="1.0"))
    m = compose_spec_model(load_spec(path), "both")
    assert [p.name for p in m.parameters] == ["C"]
    err = _compose_error(tmp_path, "shared: true, ", "shared: true, ", "2.0")
    assert err.startswith("s.yaml:9:7: error: composition 'both': parameter 'C' has default 1.0 in 'first' (at "
                          "s.yaml:3:18) but 2.0 in 'second'"), err


def test_shared_must_be_a_boolean(tmp_path):
    with pytest.raises(SpecError, match="'shared' must be true or false") as exc:
        load_spec(write(tmp_path, TWO.format(first="shared: yes please, ", second="", default="1.0")))
    assert caret(exc.value) == "yes please"
