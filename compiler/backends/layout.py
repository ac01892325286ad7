"""Flat layouts of a Program's inputs, parameters, outputs and Jacobian (shared by the backends).

- ``X`` ``(B, nx)``: the input axis' storage (``LabeledAxis.from_variables(program.inputs)``: variables
  grouped by sub-axis, each variable's components contiguous in flat storage order, Mandel for SR2).
  Row stride ``x_stride``, unit column stride.
- ``P`` ``(B or 1, np)``: parameters in ``program.parameters`` order, components contiguous; the row
  stride is 0 when the parameters are shared by all points.
- ``Y`` ``(B, ny)``: the output axis' storage (same rule).
- ``J`` ``(B, ny, nx)``: d Y / d X, row-major: entry (r, c) at ``r * nx + c`` within a point. A
  program computing a tangent (``Program.jacobian_of``/``jacobian_wrt`` set) writes ``(B, nty, ntx)``
  instead: rows the selected outputs, columns the selected inputs, each on its own axis built by the
  same rule (:meth:`Layout.jacobian_shape`). Columns may include parameters (``jacobian_wrt`` names
  ``$p``: the ``total`` variant, or a tangent that lists parameters): they follow the selected
  inputs, in parameter order, the runtime's axis of ``(input names..., parameter names...)``.
- ``ST`` ``(B, 3)``: converged (1/0), iterations, residual norm (implicit programs), as the generated
  PyTorch function returns it; the C and Triton kernels write the three as ``(B,)`` arrays (bool,
  int32, dtype) and read ``X`` as one pointer and row stride per input variable (its columns).
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from modelc import ir
from modelc.errors import InternalError
from modelc.runtime.axis import LabeledAxis


def _offsets(variables) -> tuple[dict[str, int], int]:
    """Offsets of variables on their flat axis. Inputs and outputs follow the runtime's
    :class:`~modelc.runtime.axis.LabeledAxis` (which groups names by sub-axis), parameters their order."""
    variables = tuple(variables)
    if variables and isinstance(variables[0], ir.Variable):
        axis = LabeledAxis.from_variables([(v.name, v.type) for v in variables])
        return {v.name: axis.offset(v.name) for v in variables}, axis.size
    off, n = {}, 0
    for v in variables:
        off[v.name] = n
        n += v.type.size
    return off, n


@dataclass(frozen=True)
class Layout:
    inputs: tuple[ir.Variable, ...]
    parameters: tuple[ir.Parameter, ...]
    outputs: tuple[ir.Variable, ...]

    @classmethod
    def of(cls, program: ir.Program) -> "Layout":
        return cls(tuple(program.inputs), tuple(program.parameters), tuple(program.outputs))

    @property
    def nx(self) -> int:
        return _offsets(self.inputs)[1]

    @property
    def ny(self) -> int:
        return _offsets(self.outputs)[1]

    @property
    def np(self) -> int:
        return _offsets(self.parameters)[1]

    def axis_inputs(self) -> tuple[tuple[ir.Variable, int], ...]:
        """The input variables in the order of the runtime's input axis (grouped by sub-axis, which
        may differ from the program's order) with their offsets: the order of the per-variable
        views a call hands the C backend (``input_axis.variable_names``)."""
        off, _ = _offsets(self.inputs)
        return tuple(sorted(((v, off[v.name]) for v in self.inputs), key=lambda p: p[1]))

    def input_columns(self) -> list[tuple[sp.Symbol, int]]:
        off, _ = _offsets(self.inputs)
        return [(s, off[v.name] + i) for v in self.inputs for i, s in enumerate(v.symbols)]

    def param_columns(self) -> list[tuple[sp.Symbol, int]]:
        off, _ = _offsets(self.parameters)
        return [(s, off[p.name] + i) for p in self.parameters for i, s in enumerate(p.symbols)]

    def param_names_by_column(self) -> list[str]:
        return [p.name for p in self.parameters for _ in range(p.type.size)]

    def output_entries(self, program: ir.Program) -> list[tuple[int, sp.Expr]]:
        out = []
        off, _ = _offsets(self.outputs)
        for v in self.outputs:
            comps = program.results.get(v.name)
            if comps is None or len(comps) != v.type.size:
                raise InternalError(f"program {program.name}: output {v.name} has "
                                    f"{'no result' if comps is None else len(comps)} component(s), "
                                    f"expected {v.type.size}")
            out += [(off[v.name] + i, sp.sympify(c)) for i, c in enumerate(comps)]
        return out

    def jacobian_variables(self, program: ir.Program) -> tuple[tuple[ir.Variable, ...], tuple[ir.Variable, ...]]:
        """The Jacobian's row (output) and column (input) variables: all, or the program's selection."""
        from modelc.passes.differentiate import param_variable

        rows = self.outputs if program.jacobian_of is None else tuple(
            v for v in self.outputs if v.name in program.jacobian_of)
        pvars = tuple(param_variable(p) for p in self.parameters)
        cols = self.inputs if program.jacobian_wrt is None else tuple(
            v for v in self.inputs + pvars if v.name in program.jacobian_wrt)
        return rows, cols

    def jacobian_shape(self, program: ir.Program) -> tuple[int, int]:
        """(rows, columns) of one point's Jacobian in ``program``."""
        rows, cols = self.jacobian_variables(program)
        return _offsets(rows)[1], _offsets(cols)[1]

    def jacobian_entries(self, program: ir.Program) -> list[tuple[tuple[int, int], sp.Expr]]:
        """Every entry of J, zeros included, in row-major order."""
        rows, cols = self.jacobian_variables(program)
        yoff, ny = _offsets(rows)
        xoff, nx = _offsets(cols)
        types = {v.name: v.type for v in self.outputs + cols}
        entries: dict[tuple[int, int], sp.Expr] = {}
        for (of, wrt), block in program.derivatives.items():
            if of not in yoff or wrt not in xoff:
                raise InternalError(f"program {program.name}: derivative block d {of} / d {wrt} is not "
                                    "over a (selected) output and input")
            if len(block) != types[of].size or any(len(r) != types[wrt].size for r in block):
                raise InternalError(f"program {program.name}: block d {of} / d {wrt} has the wrong shape")
            for i, row in enumerate(block):
                for j, e in enumerate(row):
                    entries[(yoff[of] + i, xoff[wrt] + j)] = sp.sympify(e)
        return [((r, c), entries.get((r, c), sp.S.Zero)) for r in range(ny) for c in range(nx)]
