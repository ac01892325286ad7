"""The compiler's intermediate representations, their printers, verifier and interpreter.

- :mod:`modelc.ir.model`: the Model IR (variables, parameters, equations, implicit systems,
  partials; one :class:`Model` type for the declared, composed and differentiated stages, each
  pass checking the properties its precondition needs and raising ``InternalError`` where one is
  missing, see docs/architecture.md);
- :mod:`modelc.ir.program`: the Program IR (``Assign``, ``LinearSolve``, ``Newton``) and its printer;
- :mod:`modelc.ir.analysis`: what a statement reads and writes, pruning dead statements;
- :mod:`modelc.ir.verify`: the verifier the tests run after every stage;
- :mod:`modelc.ir.interpret`: the reference interpreter of a Program.

``from modelc.ir import Model, Program, ...`` keeps working: the names are re-exported here.
"""
from __future__ import annotations

from modelc.ir.model import (ComposeDecl, Equation, ImplicitSystem, Loc, Model, Parameter, Partial,
                             SolverOptions, Spec, Tangent, Variable, component_symbols, param_symbols)
from modelc.ir.program import (FINITE_MAX, LINE_SEARCH_C, RTOL_FLOOR_EPS, VARIANT_BITS, Assign, LinearSolve, Newton,
                               Program, Statement, Variant, export_values, format_program, variants_of, view)

__all__ = [
    "Loc", "component_symbols", "param_symbols", "Variable", "Parameter", "Equation", "SolverOptions",
    "ImplicitSystem", "Partial", "Tangent", "Model", "ComposeDecl", "Spec",
    "FINITE_MAX", "LINE_SEARCH_C", "RTOL_FLOOR_EPS", "Assign", "LinearSolve", "Newton", "Statement", "Program",
    "export_values", "format_program",
    "Variant", "VARIANT_BITS", "variants_of", "view",
]
