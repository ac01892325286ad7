"""The backends' shared statement emitter (modelc.backends.statements)."""
from __future__ import annotations

from pathlib import Path

import pytest

from modelc import driver, ir
from modelc.backends.names import Namer
from modelc.backends.torch_backend import TorchEmitter
from modelc.backends.torch_printer import TorchPrinter

SPEC = Path(__file__).parents[3] / "spec" / "library.yaml"


def test_guarded_runs_an_after_callable_right_after_its_statement():
    """Inside a guarded group, the group is closed after the statement, the callable's lines come
    next, and the rest of the group is guarded again."""
    program = driver.compile_model(driver.load_spec(SPEC), "j2_linear_iso").program
    full = sum(v.bit for v in ir.variants_of(program))
    masks = program.masks
    k = next(i for i in range(len(masks) - 2) if masks[i] != full and masks[i + 1] == masks[i] == masks[i + 2])
    namer = Namer(short=True)
    em = TorchEmitter(TorchPrinter(namer), namer)
    em.guarded(program, {k: lambda: em.line("# MARK")})
    mark = next(i for i, line in enumerate(em.lines) if line.strip() == "# MARK")
    target = namer(program.body[k].target)
    assert em.lines[mark - 1].strip().startswith(f"{target} = ")
    assert em.lines[mark + 1].strip().startswith(f"if V & {masks[k]}:")
    assert em.lines[mark + 2].strip().startswith(f"{namer(program.body[k + 1].target)} = ")
    # without it, the group is one block
    em2 = TorchEmitter(TorchPrinter(namer), namer)
    em2.guarded(program)
    assert sum(line.strip().startswith("if V &") for line in em2.lines) + 1 == sum(
        line.strip().startswith("if V &") for line in em.lines)


# ----------------------------------------------------------------- where a Newton point stops
# sqrt(u) = a from u = 1: the first step goes to 2a - 1, so a < 1/2 makes the next residual NaN (a
# square root of a negative number) after one step, a = NaN makes the first one NaN, and a >= 1/2
# converges to a^2. Two unknowns (a coupled copy) take the system's path (the C backend's unrolled
# step and its LU fallback, the Triton elimination).
STOP_SPEC = """
models:
  sqrt_one:
    doc: one unknown
    inputs:
      a: {var: forces/a}
    implicit:
      unknowns:
        u: {var: state/u}
      residuals:
        u: sqrt(u) - a
      guess:
        u: 1
      solver: {rtol: 1.0e-12, atol: 1.0e-14, max_iter: 40}
  sqrt_pair:
    doc: two unknowns
    inputs:
      a: {var: forces/a}
    implicit:
      unknowns:
        u: {var: state/u}
        v: {var: state/v}
      residuals:
        u: sqrt(u) - a
        v: v - u / 2 + (v - u / 2)**3
      guess:
        u: 1
        v: 0
      solver: {rtol: 1.0e-12, atol: 1.0e-14, max_iter: 40}
  square_one:
    doc: a singular Jacobian at the guess
    inputs:
      a: {var: forces/a}
    implicit:
      unknowns:
        u: {var: state/u}
      residuals:
        u: u**2 - a
      guess:
        u: 0
      solver: {rtol: 1.0e-12, atol: 1.0e-14, max_iter: 40}
"""


@pytest.fixture(scope="module")
def stop_modules(tmp_path_factory):
    from modelc.backends.module import write_atomic
    from modelc.cache import import_file

    folder = tmp_path_factory.mktemp("newton_stop")
    path = folder / "stop.yaml"
    path.write_text(STOP_SPEC)
    spec = driver.load_spec(path)
    out = {}
    for name in ("sqrt_one", "sqrt_pair", "square_one"):
        res = driver.compile_model(spec, name)
        write_atomic(folder / f"{name}.py", res.source)
        out[name] = (import_file(folder / f"{name}.py", f"newton_stop_{name}"), res.program)
    return out


def _stops(stop_modules, name: str, backend: str, a):
    """(converged, iterations, state/u) of ``name`` on ``backend`` (or the reference interpreter)
    at the inputs ``a``."""
    import numpy as np
    import torch

    from modelc.interpret import interpret
    from rt_helpers import HAVE_CC, IN_CI, NO_CC

    if backend == "c" and not HAVE_CC and not IN_CI:
        pytest.skip(NO_CC)
    ins = {"forces/a": torch.tensor(a)}
    mod, program = stop_modules[name]
    if backend == "interpreter":
        res, _, st = interpret(program, ins)
        return (np.asarray(st["converged"]).astype(bool), np.asarray(st["iterations"]),
                np.asarray(res["state/u"]).reshape(-1))
    kw = {"device": "cpu"} if backend == "triton" else {}
    r = mod.Model(dtype=torch.float64, backend=backend, **kw)(ins)
    return (r.status.converged.numpy().reshape(-1).astype(bool), r.status.iterations.numpy().reshape(-1),
            r["state/u"].numpy().reshape(-1))


@pytest.mark.parametrize("backend", ["interpreter", "torch", "c", "triton"])
@pytest.mark.parametrize("name", ["sqrt_one", "sqrt_pair"])
def test_a_point_stops_at_a_residual_that_is_not_finite(stop_modules, name, backend):
    """Without a line search a point stops at the first residual that is NaN or infinite, not
    converged, with the steps it took counted (0 from a NaN input, 1 where the first step left the
    square root's domain), as the reference interpreter does; it does not keep its block (C), its
    program (Triton) or the batch (PyTorch) iterating to max_iter, and the other points of the same
    block converge as if it were not there (a^2)."""
    import numpy as np

    a = np.array([2.0, 0.25, float("nan"), 0.75, 1.5, 0.1, 3.0] * 5)
    conv, its, u = _stops(stop_modules, name, backend, a)
    good = a >= 0.5
    assert (conv == good).all(), conv
    np.testing.assert_allclose(u[good], a[good] ** 2, rtol=1e-10)  # (rtol 1e-12 of the first residual)
    assert np.isnan(u[~good]).all()
    assert (its[np.isnan(a)] == 0).all() and (its[(a < 0.5) & ~np.isnan(a)] == 1).all(), its
    assert its.max() < 40


@pytest.mark.parametrize("backend", ["interpreter", "torch", "c", "triton"])
def test_a_step_that_is_not_finite_is_taken_and_the_point_stops_after_it(stop_modules, backend):
    """u^2 = a from u = 0: the Jacobian is 0, the step a / 0 infinite; the point takes it (one
    iteration) and stops at the infinite residual there, on every backend as in the interpreter
    (which until 2026-11-29 stopped before the step and counted none); a = 0 converges at once."""
    import numpy as np

    a = np.array([0.0, 1.0, 4.0, 0.0, 2.5] * 4)
    conv, its, _ = _stops(stop_modules, "square_one", backend, a)
    assert (conv == (a == 0)).all(), conv
    assert (its == np.where(a == 0, 0, 1)).all(), its
