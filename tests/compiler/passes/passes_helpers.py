"""Hand-built models for the pass tests (no front end needed)."""
from __future__ import annotations

import numpy as np
import sympy as sp

from modelc.ir import (ComposeDecl, Equation, ImplicitSystem, Model, Parameter, SolverOptions, Variable,
                       component_symbols)
from modelc.passes.compose import compose
from modelc.runtime.types import SR2, Scalar, TensorType


def var(name: str, t: TensorType = Scalar) -> Variable:
    return Variable(name, t)


def sym(name: str, t: TensorType = Scalar):
    s = component_symbols(name, t)
    return s[0] if t is Scalar else s


def leaf(name: str, inputs, outputs: dict, params=()) -> Model:
    """``outputs``: {Variable: tuple of component expressions (or one expression for a Scalar)}."""
    eqs = tuple(Equation(v, tuple(e) if isinstance(e, (tuple, list)) else (e,)) for v, e in outputs.items())
    return Model(name=name, inputs=tuple(inputs), outputs=tuple(outputs), parameters=tuple(params),
                 equations=eqs)


def implicit(name, inputs, unknowns, residuals, guess, uses=(), params=(), solver=SolverOptions()):
    def eqs(vs, es):
        return tuple(Equation(v, tuple(e) if isinstance(e, (tuple, list)) else (e,)) for v, e in zip(vs, es))
    system = ImplicitSystem(unknowns=tuple(unknowns), residuals=eqs(unknowns, residuals),
                            guess=eqs(unknowns, guess), uses=tuple(uses), solver=solver)
    return Model(name=name, inputs=tuple(inputs), outputs=tuple(unknowns), parameters=tuple(params),
                 implicit=system)


def param(name: str, default: float | None = None) -> Parameter:
    return Parameter(name, Scalar, None if default is None else (float(default),))


def psym(name: str):
    return component_symbols("$" + name, Scalar)[0]


def seed_models():
    """The NEML2 seed's y1 = f(x1, x2), y2 = g(y1, x3), y = h(y1, y2, x4), with concrete smooth
    functions (declared in a scrambled order so that sorting matters)."""
    x1, x2, x3, x4, y1, y2 = (sym(n) for n in ("x1", "x2", "x3", "x4", "y1", "y2"))
    a = psym("a")
    f = leaf("f", [var("x1"), var("x2")], {var("y1"): sp.sin(x1) * x2 + a * x1 ** 2}, [param("a", 0.7)])
    g = leaf("g", [var("y1"), var("x3")], {var("y2"): sp.exp(y1 * x3 / 3) + y1})
    h = leaf("h", [var("y1"), var("y2"), var("x4")], {var("y"): y1 * y2 + sp.log(1 + x4 ** 2) * y2 ** 2})
    return f, g, h


def central_fd(fun, x: dict, name: str, eps: float = 1e-6) -> np.ndarray:
    """d fun(x) / d x[name] by central differences: shape batch + (out..., in components)."""
    base = np.asarray(x[name], dtype=np.float64)
    flat = base.reshape(base.shape[:1] + (-1,))
    cols = []
    for k in range(flat.shape[1]):
        xp, xm = dict(x), dict(x)
        dp = flat.copy(); dp[:, k] += eps
        dm = flat.copy(); dm[:, k] -= eps
        xp[name] = dp.reshape(base.shape)
        xm[name] = dm.reshape(base.shape)
        cols.append((fun(xp) - fun(xm)) / (2 * eps))
    return np.stack(cols, axis=-1)


def coupled(n_tensors: int):
    """Unknowns: n_tensors SR2 (X, and Y if 2) and a scalar q; a used 'stress' model S = 2 mu X that
    appears inside the implicit model and again in the outer composition."""
    X, E, q, qo, dt = sym("state/X", SR2), sym("forces/E", SR2), sym("state/q"), sym("old_state/q"), sym("forces/dt")
    S = sym("state/S", SR2)
    c, mu = psym("c"), psym("mu")
    stress = leaf("stress", [var("state/X", SR2)], {var("state/S", SR2): tuple(2 * mu * xi for xi in X)},
                  [param("mu", 0.7)])
    nS = sp.sqrt(sp.Rational(1, 100) + sum(si ** 2 for si in S))
    unknowns = [var("state/X", SR2), var("state/q")]
    inputs = [var("forces/E", SR2), var("old_state/q"), var("forces/dt"), var("state/S", SR2)]
    guess = [E, qo]
    resX = [X[i] * (1 + c * q) - E[i] for i in range(6)]
    resq = q - qo - dt * nS / (1 + q ** 2)
    if n_tensors == 2:
        Y, Yo = sym("state/Y", SR2), sym("old_state/Y", SR2)
        resX = [resX[i] + sp.Rational(1, 5) * Y[i] for i in range(6)]
        resY = [Y[i] - Yo[i] - dt * (S[i] - sp.Rational(1, 2) * Y[i] * nS) for i in range(6)]
        unknowns.insert(1, var("state/Y", SR2))
        inputs.append(var("old_state/Y", SR2))
        guess.insert(1, Yo)
        residuals = [resX, resY, resq]
    else:
        residuals = [resX, resq]
    imp = implicit("update", inputs, unknowns, residuals, guess, uses=["stress"], params=[param("c", 0.5)],
                   solver=SolverOptions(rtol=1e-13, atol=1e-13))
    avail = {"stress": stress, "update": imp}
    return compose(ComposeDecl("coupled", ("stress", "update"), keep=("state/X",)), avail), residuals, unknowns


def coupled_inputs(model, rng, n=6):
    x = {}
    for v in model.inputs:
        if v.name == "forces/dt":
            x[v.name] = rng.uniform(0.05, 0.5, n)
        elif v.name == "old_state/q":
            x[v.name] = rng.uniform(0.0, 0.5, n)
        else:
            x[v.name] = rng.uniform(-0.5, 0.5, (n,) + v.type.base_shape)
    return x


def visco():
    """Viscoelastic backward Euler: S = E (eps - ep) used by R(ep) = ep - ep_old - dt S / eta."""
    eps, ep, epo, dt, sig = sym("forces/E"), sym("state/ep"), sym("old_state/ep"), sym("forces/dt"), sym("state/S")
    el = leaf("elastic", [var("forces/E"), var("state/ep")], {var("state/S"): psym("E") * (eps - ep)},
              [param("E", 100.0)])
    vi = implicit("visco", [var("old_state/ep"), var("forces/dt"), var("state/S")], [var("state/ep")],
                  [ep - epo - dt * sig / psym("eta")], [epo], uses=["elastic"], params=[param("eta", 10.0)])
    return el, vi
