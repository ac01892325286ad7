"""Shared helpers of the front-end tests (a plain module, imported by the test files)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import sympy as sp

from modelc.functions import numpy_namespace

REPO = Path(__file__).resolve().parents[3]
SPEC_DIR = REPO / "spec"


def lambdify(args, expr):
    return sp.lambdify(args, expr, modules=[numpy_namespace(), "numpy"])


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    """A spec file holding the dedented text."""
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def central_fd(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite-difference gradient of a scalar function of a flat float64 vector."""
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def caret(err) -> str:
    """The text the caret of a located error (SpecError) underlines."""
    lines = str(err).split("\n")
    for i, line in enumerate(lines[1:], 1):
        m = re.fullmatch(r"    ( *)(\^+)", line)
        if m:
            text = lines[i - 1][4:]
            return text[len(m.group(1)):len(m.group(1)) + len(m.group(2))]
    raise AssertionError(f"no caret in:\n{err}")


# An implicit model whose residual reads a define (an inverse of a tensor of rational entries,
# normalised) four times: 267,478 nodes as a tree, 186 distinct subexpressions (test_limits, and
# its compiled values in tests/compiler/test_driver.py).
SHARED_DEFINES = """
models:
  s:
    inputs: {a: {var: forces/a, type: SR2}}
    define:
      M: safe_div(1, 1 + norm(ddot(outer(a, a), a)))*ddot(outer(a, a), a)
      Q: inv(3*I2 + 0.1*dev(M))
      N: safe_div(1, 1 + norm(Q))*Q
    implicit:
      unknowns:
        T: {var: state/T, type: SR2}
        g: {var: state/g}
      residuals:
        T: T - old(T) - (-0.1615*tanh(ddot(dev(T), N))*N + 0.2*tanh(g)*N)
        g: g - old(g) - 0.1*tanh(norm(dev(T)))
"""
