"""``tangent: {of: [...], wrt: [...]}`` on a model or a composition: loaded into the IR, part of the
spec digest, and every mistake a SpecError at the offending name (file:line, caret)."""
from __future__ import annotations

import pytest

from fe_util import write
from modelc.driver import compile_model, load_spec
from modelc.errors import SpecError

SPEC = """
models:
  hooke:
    parameters:
      E: {default: 2.0}
    inputs:
      eps: {var: forces/E, type: SR2}
    outputs:
      S: {var: state/S, type: SR2}
      W: {var: state/W}
    equations:
      S: E*eps
      W: E*ddot(eps, eps)/2
    TANGENT_MODEL
compose:
  both:
    models: [hooke]
    TANGENT_COMPOSE
"""


def _spec(tmp_path, model: str = "", compose: str = ""):
    return write(tmp_path, SPEC.replace("TANGENT_MODEL", model).replace("TANGENT_COMPOSE", compose))


def _error(tmp_path, name: str = "both", **kw) -> SpecError:
    path = _spec(tmp_path, **kw)
    with pytest.raises(SpecError) as info:
        compile_model(load_spec(path), name)
    return info.value


def test_tangent_is_loaded_and_changes_the_digest(tmp_path):
    (tmp_path / "plain").mkdir()
    plain = load_spec(_spec(tmp_path / "plain"))
    spec = load_spec(_spec(tmp_path, model="tangent: {of: [state/S], wrt: [forces/E]}",
                           compose="tangent: {of: [state/W], wrt: [forces/E]}"))
    assert spec.model("hooke").tangent.of == ("state/S",)
    assert spec.compositions[0].tangent.of == ("state/W",) and spec.compositions[0].tangent.wrt == ("forces/E",)
    assert spec.digest != plain.digest  # the generated module differs, so must the cache key
    done = compile_model(spec, "both")
    assert done.tangent is not None and set(done.tangent.derivatives) == {("state/W", "forces/E")}
    assert "TANGENT = (('state/W',), ('forces/E',))" in done.source
    assert compile_model(plain, "both").tangent is None


@pytest.mark.parametrize("where, text, message, caret", [
    ("compose", "tangent: {of: [state/SS], wrt: [forces/E]}",
     "the tangent of composition 'both' names 'state/SS' in 'of', which is not one of its outputs", "state/SS"),
    ("compose", "tangent: {of: [state/S], wrt: [forces/S]}",
     "names 'forces/S' in 'wrt', which is not one of its inputs or parameters", "forces/S"),
    ("model", "tangent: {of: [state/S], wrt: [state/S]}",
     "the tangent of model 'hooke' names 'state/S' in 'wrt', which is not one of its inputs or parameters", "state/S"),
    ("compose", "tangent: {of: [state/S, state/S], wrt: [forces/E]}", "lists 'state/S' twice in 'of'", "state/S"),
    ("compose", "tangent: {of: [], wrt: [forces/E]}", "'of' lists no variables", "[]"),
    ("compose", "tangent: {of: [state/S]}", "wrt", None),
    ("compose", "tangent: {of: [state/S], wrt: [forces/E], by: x}", "by", "by"),
    ("compose", "tangent: [state/S, forces/E]", "must be a mapping", None),
])
def test_tangent_mistakes_point_at_the_name(tmp_path, where, text, message, caret):
    err = _error(tmp_path, **{where: text})
    msg = str(err)
    assert message in msg, msg
    assert "s.yaml:" in msg and "Traceback" not in msg
    if caret is not None:
        line = [ln for ln in msg.split("\n") if ln.strip().startswith("^")]
        assert line, msg
        src = msg.split("\n")[msg.split("\n").index(line[0]) - 1]
        start = len(line[0]) - len(line[0].lstrip())
        assert src[start:start + len(line[0].strip())].startswith(caret[: len(line[0].strip())]), msg
