"""What an export needs from a compiled model: its flat layouts and the per-point C code.

The tangent is always d ``state/S`` / d ``forces/E`` (6 x 6, Mandel), lowered as its own program
(the implicit-function-theorem solve pruned to those columns), whatever the spec declares.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from modelc import __version__
from modelc.errors import InputError

STRESS, STRAIN = "state/S", "forces/E"


@dataclass(frozen=True)
class VarSlot:
    """A variable's place in a flat per-point array: name, type name, offset, size (and, for a
    parameter, its default values, units and doc)."""

    name: str
    type: str
    offset: int
    size: int
    default: tuple[float, ...] | None = None
    units: str = ""
    doc: str = ""
    bounds: str = ""  # a parameter's allowed values ("(0, inf)"; "" for any finite value)

    def as_json(self) -> dict:
        out = {"name": self.name, "type": self.type, "offset": self.offset, "size": self.size}
        if self.default is not None or self.units or self.doc:
            out.update(default=None if self.default is None else list(self.default), units=self.units,
                       doc=self.doc)
        if self.bounds:
            out["bounds"] = self.bounds
        return out


@dataclass(frozen=True)
class Exported:
    """A model ready to export: names, layouts, the per-point C code (``point_value``,
    ``point_derivative`` writing the 6 x 6 tangent: the UMAT's) and the batched C code (the C
    interface's)."""

    name: str          # the model's name
    symbol: str        # the C identifier prefix (the name, sanitised)
    spec: str          # the spec file, as given
    spec_hash: str
    implicit: bool
    inputs: tuple[VarSlot, ...]
    outputs: tuple[VarSlot, ...]
    parameters: tuple[VarSlot, ...]
    state: tuple[tuple[str, str], ...]  # (state/x, old_state/x) pairs: outputs fed back as inputs
    point_code: str
    #: the C backend's batched source of the same program (``mc_value``/``mc_tangent`` over blocks of
    #: points in SIMD lanes, the kernel header inlined): what ``modelc export c`` embeds; "" if not made
    block_code: str = ""
    #: the input variables in the order the batched code takes their pointers (the input axis's,
    #: Layout.axis_inputs: not always the program's)
    block_inputs: tuple[str, ...] = ()
    #: the declared initial values of the state (the spec's ``initial:``): ``(old_state/x, C
    #: expressions of its components over the parameter row ``p``)``, for the inputs a first step
    #: reads; a state without one starts at zero
    initial: tuple[tuple[str, tuple[str, ...]], ...] = ()
    version: str = __version__

    @property
    def nx(self) -> int:
        return sum(v.size for v in self.inputs)

    @property
    def ny(self) -> int:
        return sum(v.size for v in self.outputs)

    @property
    def np(self) -> int:
        return sum(v.size for v in self.parameters)

    def slot(self, side: str, name: str) -> VarSlot:
        for v in getattr(self, side):
            if v.name == name:
                return v
        raise KeyError(name)

    def has(self, side: str, name: str) -> bool:
        return any(v.name == name for v in getattr(self, side))


def _slots(variables) -> tuple[VarSlot, ...]:
    from modelc.runtime.axis import LabeledAxis

    axis = LabeledAxis.from_variables([(v.name, v.type) for v in variables])
    return tuple(VarSlot(v.name, v.type.name, axis.offset(v.name), v.type.size) for v in variables)


#: what the exported files define from the prefix (``<symbol>_value``, ``<SYMBOL>_NX``, ``<symbol>_umat``)
_EXPORTED = ("value", "tangent", "default_parameters", "check_parameters", "advance", "initial_state", "umat")


def c_symbol(name: str, code: str = "") -> str:
    """The C prefix of an exported model: its name as a C identifier (``-`` and other characters
    outside ``[A-Za-z0-9_]`` become ``_``, a leading digit gets ``m_``), kept as the user wrote it
    (a model called ``B`` or ``n`` exports ``B_value``), with ``_model`` added only when a name the
    export defines from it would clash with an identifier of ``code`` (the model's own C code, e.g.
    a model called ``point`` next to the static ``point_value``, or ``mc`` next to ``MC_W``)."""
    symbol = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "model"
    if symbol[0].isdigit():
        symbol = "m_" + symbol
    taken = set(re.findall(r"[A-Za-z_]\w*", code))
    if any(f"{symbol}_{what}" in taken for what in _EXPORTED) or \
            any(t.startswith(symbol.upper() + "_") for t in taken):
        symbol += "_model"
    return symbol


def _initial_code(value, params: list[VarSlot], inputs: tuple[VarSlot, ...]) -> tuple:
    """``Exported.initial`` of the value program: its ``initial`` equations printed as C over ``p``."""
    from modelc.backends.c_printer import CPrinter

    offset = {p.name: p.offset for p in params}
    column = {sym: f"p[{offset[par.name] + k}]" for par in value.parameters for k, sym in enumerate(par.symbols)}
    printer = CPrinter(lambda sym: column[sym])
    names = {v.name for v in inputs}
    return tuple(("old_" + eq.var.name, tuple(printer.doprint(c) for c in eq.components))
                 for eq in value.initial if "old_" + eq.var.name in names)


def prepare(spec_path: str | Path, model: str | None = None) -> Exported:
    """Compile ``model`` of the spec (the spec's only composition when None) for export.

    An :class:`InputError` when the model has no ``state/S`` output or no ``forces/E`` input (an
    export drives a stress update by the strain)."""
    from modelc.backends.c_backend import c_source, point_source
    from modelc.backends.layout import Layout
    from modelc.runtime import cheader
    from modelc.cache import pick_model
    from modelc.driver import load_spec, lower_model
    from modelc.passes.cse import cse
    from modelc.passes.lower import lower

    spec = load_spec(spec_path)
    name = pick_model(spec, model)
    done = lower_model(spec, name)
    outs, ins = [v.name for v in done.model.outputs], [v.name for v in done.model.inputs]
    if STRESS not in outs or STRAIN not in ins:
        raise InputError(f"{spec_path}: model {name!r} cannot be exported for a host code: it needs an "
                         f"output {STRESS!r} (stress) and an input {STRAIN!r} (strain); its outputs: "
                         f"{', '.join(outs)}; its inputs: {', '.join(ins)}")
    tangent = cse(lower(done.model, derivatives=True, select=((STRESS,), (STRAIN,))))
    params, off = [], 0
    for p in done.value.parameters:
        params.append(VarSlot(p.name, p.type.name, off, p.type.size, p.default, p.units, p.doc, p.bounds))
        off += p.type.size
    pairs = tuple((o, "old_" + o) for o in outs if "old_" + o in ins and o.startswith("state/"))
    point_code = point_source(tangent, "tangent")
    block_code = cheader.standalone(c_source(tangent))
    inputs = _slots(done.value.inputs)
    return Exported(name=name, symbol=c_symbol(name, point_code + block_code), spec=str(spec_path),
                    spec_hash=spec.digest,
                    implicit=bool(done.value.status), inputs=inputs,
                    outputs=_slots(done.value.outputs), parameters=tuple(params), state=pairs,
                    point_code=point_code, block_code=block_code,
                    block_inputs=tuple(v.name for v, _ in Layout.of(tangent).axis_inputs()),
                    initial=_initial_code(done.value, params, inputs))
