"""The base class of generated models, and what a call returns.

A generated module defines ``class Model(CompiledModel)`` with class attributes describing the model
(``INPUTS``, ``OUTPUTS``, ``PARAMETERS``, ``STATE``, ``FORCES``, ``IMPLICIT``, ``SOLVER``, ``BAKED``)
and entry points: ``torch_eval`` (the generated PyTorch function), ``kernel`` (the Triton kernel),
each taking the bit of the variant asked for (``VARIANTS``), and ``c_source`` (the C backend's
source, one entry point per variant, built by :mod:`modelc.runtime.cbuild`). Backends: ``"torch"``, ``"triton"`` (CUDA, or the interpreter),
``"c"`` (CPU); ``"auto"`` picks Triton on CUDA, C on the CPU when a compiler builds it, else PyTorch
(see docs/backends.md). Everything else — validation at the call
boundary, parameter handling, backend choice, launch, labeled results, convergence status and
adaptive sub-stepping — lives here, once, generically.

Flat layout shared with the generated code: ``X (B, nx)`` inputs on :attr:`input_axis`, ``P (1|B, np)``
parameters in ``PARAMETERS`` order, ``Y (B, ny)`` outputs on :attr:`output_axis`, ``J (B, ny, nx)``,
``ST (B, 3)`` = (converged, iterations, residual norm).
"""
from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from modelc.runtime.errors import InputError, InternalError
from modelc.runtime import autograd, callpath
from modelc.runtime.bufferpool import BufferPool
from modelc.runtime import solver as _solver
from modelc.runtime.cbuild import CBuildError, pack_args, pack_tail
from modelc.runtime.axis import LabeledAxis
from modelc.runtime.checks import Interval, check_parameter, nonfinite_rows
from modelc.runtime.labeled import LabeledMatrix, LabeledVector, sub_matrix
from modelc.runtime.substep import substep, substep_tangent
from modelc.runtime.types import TYPES, TensorType


# --------------------------------------------------------------------------------------------------
# helpers the generated PyTorch code imports (accept Python floats where torch wants tensors)
# --------------------------------------------------------------------------------------------------
def t_where(c, a, b):
    return torch.where(c, a, b)


def t_minimum(a, b):
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.minimum(a, b) if isinstance(b, torch.Tensor) else torch.clamp(a, max=b)


def t_maximum(a, b):
    if not isinstance(a, torch.Tensor):
        a, b = b, a
    return torch.maximum(a, b) if isinstance(b, torch.Tensor) else torch.clamp(a, min=b)


def t_pow(a, b):
    return torch.pow(a, b)


# The spellings of modelc.functions that would name an argument more than once are these helpers,
# so an argument is printed (and, in eager PyTorch, evaluated) once at any depth of nesting.
def t_ge(a, b):
    """max_(a, b): a where a >= b, else b; NaN where either is NaN (torch.maximum), like the C and
    Triton spellings."""
    return t_maximum(a, b)


def t_le(a, b):
    """min_(a, b): a where a <= b, else b; NaN where either is NaN."""
    return t_minimum(a, b)


def t_sdiv(a, b):
    """safe_div(a, b): a / b, 0 where b == 0."""
    nz = b != 0.0
    return torch.where(nz, a / torch.where(nz, b, 1.0), 0.0)


def t_heaviside(x):
    """heaviside(x): 1 for x > 0, 0 for x <= 0 and for NaN (as the C and Triton spellings)."""
    return torch.heaviside(x, torch.zeros_like(x))


def t_powr_shift(P, a, e):
    """powr(a, e) from P = powr(a, e + 1): P / a, and powr(0, e) at a = 0 (0, 1 or inf by the sign of
    e; NaN for a NaN e). See modelc.functions.powr_shift."""
    e = torch.as_tensor(e, dtype=a.dtype, device=a.device)
    at0 = torch.where(e > 0, 0.0, torch.where(e == 0, 1.0, torch.where(e < 0, float("inf"), float("nan"))))
    nz = a != 0
    return torch.where(nz, P / torch.where(nz, a, 1.0), at0.to(a.dtype))


def t_atan2(y, x):
    """atan2(y, x) where one argument may be a Python float (a constant): made a tensor of the
    other's dtype and device (``torch.as_tensor`` alone made it float32, and a float64 model's
    atan2(sqrt(2), x) was off by 5e-9)."""
    if not isinstance(y, torch.Tensor):
        y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
    elif not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x, dtype=y.dtype, device=y.device)
    return torch.atan2(y, x)


#: the names the generated PyTorch code calls these helpers by (templates/module.py.j2 imports them)
TORCH_HELPERS = {"_where": t_where, "_minimum": t_minimum, "_maximum": t_maximum, "_tpow": t_pow,
                 "_ge": t_ge, "_le": t_le, "_sdiv": t_sdiv, "_heaviside": t_heaviside,
                 "_powr_shift": t_powr_shift, "_atan2": t_atan2}


def t_batch(v, X: torch.Tensor) -> torch.Tensor:
    """``v`` as a ``(B,)`` tensor like the columns of ``X`` (a Newton unknown must be per point)."""
    B = X.shape[0]
    if isinstance(v, torch.Tensor) and v.shape == (B,):
        return v
    return torch.as_tensor(v, dtype=X.dtype, device=X.device).expand(B).clone()


def t_put(T: torch.Tensor, cols, values) -> None:
    """``T[:, c] = v`` for each column ``c`` and value ``v`` (a ``(B,)`` or ``(1,)`` tensor, or a
    float): the generated PyTorch code writes a row of outputs, or of a Jacobian (``J[:, r]``), in
    one statement."""
    for c, v in zip(cols, values):
        T[:, c] = v


def t_matrix(rows, X: torch.Tensor) -> torch.Tensor:
    """``(B, n, m)`` from nested lists of ``(B,)``/``(1,)`` tensors and Python floats (structural
    zeros), for ``torch.linalg.solve_ex``."""
    B = X.shape[0]
    flat = [torch.as_tensor(v, dtype=X.dtype, device=X.device).expand(B) for row in rows for v in row]
    return torch.stack(flat, dim=-1).reshape(B, len(rows), len(rows[0]))


def t_rowscale(A: torch.Tensor) -> torch.Tensor:
    """``(B, n, 1)``: per row of ``A (B, n, n)`` the power of two that brings its largest ``|entry|``
    into [0.5, 1) (1 for a zero or non-finite row; at most 2^100 either way, representable in
    float32). A coupled system's rows come in different units; LAPACK's partial pivoting on the
    scaled rows picks its pivots as scaled partial pivoting would, and a power of two scales exactly
    (the C backend's ``mc_lu_solve`` does the same without scaling, see runtime/modelc_kernel.h)."""
    e = torch.frexp(A.abs().amax(-1, keepdim=True))[1].clamp(-100, 100)
    return torch.exp2((-e).to(A.dtype))  # exact: an integer power of two


# --------------------------------------------------------------------------------------------------
# descriptions
# --------------------------------------------------------------------------------------------------
class VariableInfo(NamedTuple):
    name: str
    type: str
    doc: str = ""


class ParameterInfo(NamedTuple):
    name: str
    type: str
    default: tuple[float, ...] | None
    units: str = ""
    doc: str = ""
    bounds: str = ""  # an interval such as "[0, 0.5)" (modelc.runtime.checks.Interval), or "" for none

    def __str__(self) -> str:
        d = "required" if self.default is None else (
            f"{self.default[0]:g}" if len(self.default) == 1 else str(self.default))
        return f"{self.name}: {self.type} = {d}{f' [{self.units}]' if self.units else ''}" + \
            (f" in {self.bounds}" if self.bounds else "") + (f"  {self.doc}" if self.doc else "")


@dataclass(frozen=True)
class Status:
    """Per-point Newton status of one call (batch shape of the call)."""

    converged: torch.Tensor      # bool
    iterations: torch.Tensor     # int32
    residual_norm: torch.Tensor  # the call's dtype
    substeps: torch.Tensor | None = None  # int32: sub-steps used (1 = none; a point that still failed: the most tried)

    @property
    def n_failed(self) -> int:
        return int((~self.converged).sum())

    @property
    def all_converged(self) -> bool:
        return self.n_failed == 0

    def failed(self) -> torch.Tensor:
        """Indices (one row per failed point, one column per batch dim) of the failed points."""
        return torch.nonzero(~self.converged)

    def summary(self, show: int = 10) -> str:
        n = self.converged.numel()
        if n == 0:
            return "no points"
        it = self.iterations.float()
        text = (f"{n - self.n_failed} of {n} points converged (iterations: max {int(it.max())}, "
                f"mean {float(it.mean()):.2f})")
        if self.substeps is not None and bool((self.substeps > 1).any()):
            text += f"; {int((self.substeps > 1).sum())} needed sub-stepping"
        if self.n_failed:
            idx = [tuple(int(i) for i in row) for row in self.failed()[:show]]
            idx_text = ", ".join(str(i[0]) if len(i) == 1 else str(i) for i in idx)
            more = f" and {self.n_failed - show} more" if self.n_failed > show else ""
            text += f"; {self.n_failed} FAILED (outputs are NaN) at {idx_text}{more}"
        return text

    def __str__(self) -> str:
        return self.summary()


#: plans of calls (``CompiledModel._plans``) a model keeps; more kinds of inputs than this start afresh
_PLANS = 16
#: the types of parameter overrides a planned call takes (named TypedTensors are aligned first)
_PLAIN = (torch.Tensor, float, int, torch.nn.Parameter)


class Result:
    """Outputs of one call: typed views by name, the labeled outputs, the Jacobian, the status, and
    the names of the batch dims when the inputs had named batch dims (else None)."""

    def __init__(self, outputs: LabeledVector, jacobian: LabeledMatrix | None, status: Status | None):
        self.outputs = outputs
        self._jacobian = jacobian
        self.status = status
        self.batch_names: tuple[str, ...] | None = None
        self.producer: tuple[str, str] | None = None  # (NAME, SPEC_HASH) of the model that computed it

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.outputs[name]

    def __contains__(self, name: str) -> bool:
        return name in self.outputs.axis.variable_names

    @property
    def jacobian(self) -> LabeledMatrix:
        if self._jacobian is None:
            raise InputError("this call computed no derivatives: call the model with derivatives=True")
        return self._jacobian

    def to_dict(self) -> dict[str, torch.Tensor]:
        return self.outputs.to_dict()

    def __repr__(self) -> str:
        s = f"Result({', '.join(self.outputs.axis.variable_names)}; batch {tuple(self.outputs.batch_shape)}"
        return s + (f"; {self.status.summary()})" if self.status is not None else ")")


def _type(name: str) -> TensorType:
    return TYPES[name]


def _nonfinite_points(views, B: int) -> torch.Tensor | None:
    """The points (B,) whose inputs hold a NaN or an infinity, or None when every value is finite
    (the common case costs one sum per input). ``views``: per input variable, (B or 1, size)."""
    bad = None
    for v in views:
        if v.device.type == "meta":  # shapes only: nothing to check
            return None
        rows = nonfinite_rows(v.reshape(v.shape[0], -1))
        if rows is not None:
            rows = rows.expand(B)
            bad = rows if bad is None else bad | rows
    return bad


def _fail_points(bad: torch.Tensor, Y, J, status):
    """Mark the points ``bad`` failed: NaN outputs and derivatives, not converged (in place where
    the buffers are the call's own or ``out=``'s; a broadcast Jacobian is materialised first)."""
    Y[bad] = float("nan")
    if J is not None:
        if J.stride(0) == 0:
            J = J.clone()
        J[bad] = float("nan")
    if status is not None:
        status[0][bad] = False
    return Y, J, status


def _type_dim(model: "CompiledModel", name: str) -> int:
    """The base dimension of input or parameter ``name`` (for telling batch dims from base dims)."""
    if name in model.parameter_info:
        return _type(model.parameter_info[name].type).base_dim
    return model.input_axis.type_of(name).base_dim


def interpreting() -> bool:
    """Whether Triton kernels run under the interpreter (TRITON_INTERPRET=1; read, never set)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def float64_register_cap(model: Any, variant: str | None) -> int | None:
    """The register cap a model's module asks its float64 launches of ``variant`` for
    (``Model.TRITON_MAXNREG_F64``: one number per variant, or one for all in modules an earlier
    modelc generated; None: ptxas' choice)."""
    cap = getattr(model, "TRITON_MAXNREG_F64", None)
    return cap.get(variant or "value") if isinstance(cap, Mapping) else cap


def triton_launch_options(default: int | None = None) -> dict[str, int]:
    """Options every Triton launch gets: ``maxnreg`` (ptxas' cap on registers per thread): the
    module's ``default`` (:func:`float64_register_cap` for a float64 launch: 255 for the kernels of
    coupled systems and full Jacobians, which ptxas otherwise compiles for 32 registers and heavy
    spills, 128 for the others; None: ptxas' choice), or
    ``$MODELC_TRITON_MAXNREG`` when set, for measuring a register budget on a GPU against the default
    ("none": no cap even where the module asks for one). ``benchmarks/gpu_kernels.py --maxnreg``
    reports what ptxas makes of a cap without a GPU."""
    text = os.environ.get("MODELC_TRITON_MAXNREG", "")
    if not text:
        return {"maxnreg": default} if default else {}
    if text == "none":
        return {}
    if not text.isdigit() or not 16 <= int(text) <= 255:
        raise InputError(f"$MODELC_TRITON_MAXNREG must be a whole number of registers from 16 to 255, "
                         f"or none, got {text!r}")
    return {"maxnreg": int(text)}


_WARNED: set[str] = set()  # reasons the C backend was unavailable, warned once each
#: at most this many libraries per model for exponent specialization (a sweep over integer values
#: of an exponent past it runs the general library rather than compile one per value)
MAX_SPECIALIZED = 8

TRITON_ABI = 3  # the generated Triton kernels' calling convention this runtime launches (Model.TRITON_ABI)


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def _copy_into(target: "callpath.Buffers", Y, J, status) -> None:
    """Copy what was computed outside ``target`` into it (nothing when it is already there)."""
    for dst, src in ((target.Y, Y), (target.J, J)) + tuple(zip(target.status or (), status or ())):
        if dst is None or src is None or (dst.data_ptr() == src.data_ptr() and dst.stride() == src.stride()):
            continue
        src = src.reshape(dst.shape)
        if dst.dim() == 3 and dst.stride(0) == 0:  # out= holds a broadcast (constant) Jacobian
            dst, src = dst[:1], src[:1]
        dst.copy_(src)


# --------------------------------------------------------------------------------------------------
# the base class
# --------------------------------------------------------------------------------------------------
class ParameterValues(torch.nn.Module):
    """The parameter values of a model (``model.params``): a buffer per parameter, or a
    ``torch.nn.Parameter`` for a trainable one (``state_dict`` keys ``params.<name>``)."""

    def extra_repr(self) -> str:
        return ", ".join(f"{n}{'*' if n in self._parameters else ''}" for n in {**self._buffers, **self._parameters})


def _default(p: ParameterInfo) -> float | list:
    """A parameter's default value in its base shape (a float for a scalar)."""
    t = _type(p.type)
    if t.size == 1 and not t.base_shape:
        return float(p.default[0])
    return torch.tensor(p.default, dtype=torch.float64).reshape(t.base_shape).tolist()


class CompiledModel(torch.nn.Module):
    """Base of every generated ``Model``. See the module docstring and docs/architecture.md.

    A ``torch.nn.Module``: ``.to(device, dtype)`` moves it (and sets it up for the new dtype and
    device), ``state_dict()`` holds the parameter values (``params.<name>``), :meth:`trainable`
    makes parameters ``torch.nn.Parameter`` s; calls with inputs or parameters that require grad are
    differentiable (:mod:`modelc.runtime.autograd`)."""

    NAME = ""
    SOURCE = ""
    SPEC_HASH = ""
    INPUTS: tuple[VariableInfo, ...] = ()
    OUTPUTS: tuple[VariableInfo, ...] = ()
    PARAMETERS: tuple[ParameterInfo, ...] = ()
    STATE: tuple[tuple[str, str], ...] = ()
    FORCES: tuple[tuple[str, str], ...] = ()
    IMPLICIT = False
    SOLVER: dict = {}
    BAKED: tuple[str, ...] = ()
    BAKED_ARGS: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: parameters that make up a power's exponent (``y**n``): the C backend builds a library with an
    #: integer value of theirs baked in (binary powering, not exp and log; ``specialize``)
    EXPONENTS: tuple[str, ...] = ()
    TANGENT: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # declared tangent (rows, columns)
    CONSTANT_JACOBIAN: tuple[str, ...] = ()  # variants whose Jacobian depends on the parameters only
    #: the C kernel itself fails the points whose inputs hold a NaN or an infinity (modules generated
    #: before it did leave it to the runtime's check after the call)
    C_MARKS_NONFINITE = False
    #: the Triton kernel's calling convention: 2 reads each input where it lies, writes the status as
    #: the C entry points do and fails non-finite inputs itself; 3 adds the ``zero`` argument (the
    #: one-trip loops of coupled systems' kernels). Modules generated before: 1, a packed X and a
    #: (B, 3) status. This runtime launches 3 only.
    TRITON_ABI = 1
    TRITON_MAXNREG_F64 = None  # (generated modules: their float64 kernels' register cap per variant, see triton_launch_options)
    #: the points the Triton kernel's Newton fails are solved again by the generated PyTorch code
    #: (:meth:`_retry_failed`): set for a Newton of 4 or more unknowns, whose step the kernel
    #: eliminates with guarded static pivots and the PyTorch code with a partially pivoted LU
    TRITON_RETRY = False
    INITIAL: tuple[VariableInfo, ...] = ()  # state variables with a declared initial value
    torch_initial: Any = None  # (X (rows, 0), P) -> (Y, None, None) on the INITIAL axis
    #: what a call can ask for -> the bit ``V`` the generated function and kernel take: ``value``,
    #: ``jacobian`` (J (B, ny, nx)), ``tangent`` (declared blocks), ``total`` (J (B, ny, nx + np))
    VARIANTS: dict = {}
    torch_eval: Any = None  # (X, P, V) -> (Y, J or None, ST or None)
    kernel: Any = None  # the Triton kernel (V: constexpr), None without triton
    c_source: str | None = None  # the C backend's source (modelc.backends.c_backend), if generated

    def __init__(self, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu",
                 backend: str = "auto", *, block: int | None = None, on_failure: str | None = None,
                 max_substeps: int | None = None, trainable: tuple[str, ...] = (), rtol: float | None = None,
                 atol: float | None = None, max_iter: int | None = None, bake: bool | tuple[str, ...] = (),
                 specialize: bool = True, reuse_outputs: bool = True, **param_overrides):
        super().__init__()
        self._solver = _solver.check({"rtol": rtol, "atol": atol, "max_iter": max_iter}, f"model {self.NAME}")
        self._call_solver: dict[str, Any] = {}
        self._plans: dict[tuple, callpath.Plan | None] = {}  # (derivatives, dtype, inputs' kind) -> plan
        self._requested_backend = backend
        self._configure(dtype, torch.device(device), backend)
        self.block = block
        self.on_failure = on_failure or self.SOLVER.get("on_failure", "nan")
        if self.on_failure not in ("nan", "substep"):
            raise InputError(f"model {self.NAME}: on_failure must be 'nan' or 'substep', got {self.on_failure!r}")
        self.max_substeps = int(max_substeps or self.SOLVER.get("max_substeps", 8))
        self.input_axis = LabeledAxis.from_variables([(v.name, v.type) for v in self.INPUTS])
        self.output_axis = LabeledAxis.from_variables([(v.name, v.type) for v in self.OUTPUTS])
        self._axes_cache: dict = {}
        self.tangent_axes = None if self.TANGENT is None else self._axes(*self.TANGENT)
        self.parameter_info: dict[str, ParameterInfo] = {p.name: p for p in self.PARAMETERS}
        # parameters the C backend compiles into its library as constants (docs/backends.md, "Baked
        # parameters"): the module's own BAKED, and those asked for here (True: all of them)
        chosen = tuple(self.parameter_info) if bake is True else (bake,) if isinstance(bake, str) else tuple(bake or ())
        self._check_param_names(dict.fromkeys(chosen))
        self.c_baked = tuple(n for n in self.parameter_info if n in set(self.BAKED) | set(chosen))
        self._runtime_baked = frozenset(chosen)
        # exponent specialization (C backend): EXPONENTS with an integer value shared by every point
        # are baked into a library of their own (see _c_library)
        if not isinstance(specialize, bool):
            raise InputError(f"model {self.NAME}: specialize must be True or False, got {specialize!r}")
        self.specialize = specialize
        if not isinstance(reuse_outputs, bool):
            raise InputError(f"model {self.NAME}: reuse_outputs must be True or False, got {reuse_outputs!r}")
        # result buffers on the CPU come from blocks of earlier results nothing refers to any more
        # (no page faults on every call; modelc.runtime.bufferpool)
        self._pool = BufferPool() if reuse_outputs else None
        self._exponent_columns = [c for c, n in enumerate(self.param_names_by_column())
                                  if n in self.EXPONENTS and n not in self.c_baked]
        self.params = ParameterValues()  # the parameter values: buffers, or torch.nn.Parameter (trainable)
        self._owned: dict[str, torch.Tensor] = {}  # values built here from numbers (see _param_tensor)
        self._shared_P = self._shared_key = None
        self.set_parameters(**{p.name: _default(p) for p in self.PARAMETERS if p.default is not None})
        self.set_parameters(**param_overrides)
        if trainable:
            self.trainable(*trainable)
        self._prepare_c()

    def _configure(self, dtype: torch.dtype, device: torch.device, backend: str) -> None:
        """Set dtype, device and backend (``__init__``, and ``.to()`` through :meth:`_apply`)."""
        if dtype not in (torch.float32, torch.float64):
            raise InputError(f"model {self.NAME}: dtype must be torch.float64 or torch.float32, got {dtype}")
        if device.type == "cuda" and backend != "c" and not torch.cuda.is_available():  # (c: says CPU only)
            why = "has no CUDA support (a CPU-only build)" if torch.version.cuda is None else "sees no CUDA device"
            raise InputError(f"model {self.NAME}: device {device}: this torch {torch.__version__} {why}; use "
                             "device='cpu', or install a CUDA build of torch on a machine with an NVIDIA GPU")
        self.dtype = dtype
        self.device = device
        if backend not in ("auto", "torch", "triton", "c"):
            raise InputError(f"model {self.NAME}: backend must be 'auto', 'torch', 'triton' or 'c', got {backend!r}")
        self._clib = None  # the general C library, built on first use (see _prepare_c)
        self._baked_libs = {}  # (per parameter column: its baked value or None) -> CLibrary
        if backend == "auto":
            backend = "triton" if (self.device.type == "cuda" and self.kernel is not None) else "torch"
            if backend == "triton" and self.TRITON_ABI != TRITON_ABI:
                _warn_once(f"{self.NAME}: its generated module predates this runtime's Triton calling "
                           "convention; it runs on the PyTorch backend (regenerate it with `modelc compile`)")
                backend = "torch"
            if self.device.type == "cpu" and self.c_source:
                backend = self._auto_c()
        elif backend == "c":
            if self.device.type != "cpu":
                raise InputError(f"model {self.NAME}: backend='c' runs on the CPU only, not on {self.device} "
                                 "(use backend='triton' or 'torch' there)")
            if not self.c_source:
                raise InputError(f"model {self.NAME}: this generated module has no C source (it predates "
                                 "the C backend): regenerate it with `modelc compile`")
        if backend == "triton":
            if self.kernel is None:
                raise InputError(f"model {self.NAME}: backend='triton' needs the triton package, which is "
                                 "not installed (Linux: pip install 'modelc[gpu]'); backend='c' or "
                                 "'torch' run without it")
            if self.TRITON_ABI != TRITON_ABI:
                raise InputError(f"model {self.NAME}: its generated module predates this runtime's Triton "
                                 f"calling convention (kernel ABI {self.TRITON_ABI}, this runtime launches "
                                 f"{TRITON_ABI}): regenerate it with `modelc compile`")
            if self.device.type != "cuda" and not interpreting():
                raise InputError(f"model {self.NAME}: backend='triton' on device {self.device} needs a CUDA "
                                 "device, or TRITON_INTERPRET=1 set before the generated module is imported")
        self.backend = backend

    def _auto_c(self) -> str:
        """'c' if a C compiler works here, else 'torch' with a warning (once per process and
        reason); the library itself is built by :meth:`_prepare_c`, which falls back the same way."""
        from modelc.runtime.cbuild import CBuildError, compiler

        try:
            compiler()
            return "c"
        except CBuildError as exc:
            return self._c_unavailable(str(exc))

    def _c_unavailable(self, reason: str) -> str:
        """'torch', after warning (once per process and reason) that the C backend is unavailable."""
        if reason not in _WARNED:
            _WARNED.add(reason)
            warnings.warn(f"modelc: the C backend is unavailable ({reason}); model {self.NAME} uses the "
                          "slower generated PyTorch code on the CPU", RuntimeWarning, stacklevel=4)
        return "torch"

    def _prepare_c(self) -> None:
        """On the C backend, build (or load from the cache) the library that a call with the model's
        own parameter values runs, when the model is made or moved, as the first call would: with
        exponent specialization that is the specialized library, and the general one is built only
        when a call needs it (a large model's C build takes seconds). An automatic backend falls
        back to PyTorch, with a warning, when the library does not build."""
        if self.backend != "c":
            return
        from modelc.runtime.cbuild import CBuildError

        try:
            try:
                P, _ = self._param_tensor({}, torch.Size([1]))
            except (InputError, RuntimeError):  # values per point given at construction
                P = None
            if P is None:
                self._general_lib()
            else:
                self._c_library(P)
        except CBuildError as exc:
            if self._requested_backend != "auto":
                raise
            self.backend = self._c_unavailable(str(exc))

    def _loaded_clib(self):
        """A C library of this model already loaded (every one has the same entry points), else the
        general one."""
        return self._clib or next(iter(self._baked_libs.values()), None) or self._general_lib()

    def _general_lib(self):
        """The C library with no exponent specialized (built on first use, then cached)."""
        if self._clib is None:
            from modelc.runtime.cbuild import load_library

            self._clib = load_library(self.c_source, self.NAME, self.dtype)
        return self._clib

    # -- torch.nn.Module ------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        """What ``copy.deepcopy(model)``, ``pickle`` and ``torch.save(model)`` keep: everything but the
        loaded C libraries (ctypes handles, which neither copies nor pickles); the copy loads them
        again on its first call, from the on-disk cache."""
        state = self.__dict__.copy()
        state["_clib"] = None
        state["_baked_libs"] = {}
        state.pop("_c_lib_memo", None)
        return state

    def _apply(self, fn, recurse=True):
        """``.to(device, dtype)``, ``.double()``, ``.cuda()``, ...: the parameter values move (as
        any module's buffers and parameters) and the model is set up again for the new dtype and
        device (its backend chosen again when it was ``"auto"``)."""
        try:
            probe = fn(torch.empty(0, dtype=self.dtype, device=self.device))
        except (AssertionError, RuntimeError) as exc:  # e.g. .to("cuda") on a torch built without CUDA
            raise InputError(f"model {self.NAME}: cannot move the model there: {exc}") from None
        owned = [n for n, t in self._owned.items() if self._values.get(n) is t]
        super()._apply(fn, recurse)
        self._owned = {n: self._values[n] for n in owned}
        self._shared_P = self._shared_key = None
        if (probe.dtype, probe.device) != (self.dtype, self.device):
            self._configure(probe.dtype, probe.device, self._requested_backend)
            self._prepare_c()
        return self

    def forward(self, inputs, derivatives=False, **kwargs) -> "Result":
        """The same as calling the model (``nn.Module`` convention)."""
        return self(inputs, derivatives, **kwargs)

    def trainable(self, *names: str) -> "CompiledModel":
        """Make parameters ``names`` trainable: each value becomes a ``torch.nn.Parameter`` (so
        ``model.parameters()`` yields it to an optimiser, and calls are differentiable with respect to
        it). Returns the model."""
        self._check_param_names(dict.fromkeys(names))
        baked = sorted(set(names) & self._runtime_baked)
        if baked:
            raise InputError(f"model {self.NAME}: parameter(s) {', '.join(baked)} are baked into the C library "
                             "(bake=): training them would compile a library for every new value; "
                             "leave them out of bake=")
        for name in names:
            v = self._values.get(name)
            if v is None:
                raise InputError(f"model {self.NAME}: parameter {name} has no value to train; set one first")
            if not isinstance(v, torch.nn.Parameter):
                self._store(name, torch.nn.Parameter(v.detach().to(self.dtype).clone()))
        return self

    # -- parameters ----------------------------------------------------------------------------
    @property
    def _values(self) -> dict[str, torch.Tensor]:
        """Parameter name -> its value (a tensor: buffer or ``nn.Parameter`` of :attr:`params`)."""
        holder = self._modules["params"]  # (self.params through nn.Module.__getattr__ costs ~1 us a read)
        return {**holder._buffers, **holder._parameters}

    def set_parameters(self, **values) -> None:
        """Override parameters on this model object (scalar, or batched: batch shape + base shape).
        A tensor is kept as given (read at every call: it may change in place, or require grad); a
        ``torch.nn.Parameter`` is registered as one (trainable); numbers become buffers."""
        self._check_param_names(values)
        for name, v in values.items():
            self._store(name, v)
        self._shared_P = self._shared_key = None  # the cached (1, np) row of shared parameters

    def _store(self, name: str, v: Any) -> None:
        holder = self.params
        holder._buffers.pop(name, None)
        holder._parameters.pop(name, None)
        self._owned.pop(name, None)
        if isinstance(v, torch.nn.Parameter):
            holder.register_parameter(name, v)
        elif isinstance(v, torch.Tensor):
            holder.register_buffer(name, v)
        else:
            try:
                t = torch.as_tensor(v, dtype=self.dtype, device=self.device)
            except (TypeError, ValueError, RuntimeError):
                raise InputError(f"model {self.NAME}: parameter {name} must be a number or a tensor, "
                                 f"got {type(v).__name__}") from None
            holder.register_buffer(name, t)
            self._owned[name] = t

    def _check_param_names(self, values: Mapping[str, Any]) -> None:
        unknown = [k for k in values if k not in self.parameter_info]
        if unknown:
            known = ", ".join(self.parameter_info) or "(none)"
            raise InputError(f"model {self.NAME}: unknown parameter(s) {', '.join(unknown)}; "
                             f"its parameters are {known}")

    def _param_tensor(self, overrides: Mapping[str, Any], batch_shape: torch.Size) -> tuple[torch.Tensor, bool]:
        """``P`` ``(1, np)`` if every parameter is shared, else ``(B, np)``; and whether it is shared.
        A shared row built from numbers (values this model owns) is built once and reused until a
        value changes (``set_parameters``, ``.to()``, an in-place change of the buffer,
        ``load_state_dict``); a call's overrides are written over a copy of it (their columns only);
        a tensor the caller gave the model is re-read at every call."""
        vals = self._values
        key = None
        # (inference tensors, made under torch.inference_mode, have no version counter: rebuilt)
        if len(vals) == len(self.PARAMETERS) and all(self._owned.get(n) is t and not t.is_inference()
                                                     for n, t in vals.items()):
            key = tuple(t._version for t in vals.values())
        if key is None:
            return self._build_param_tensor(overrides, batch_shape)
        if self._shared_P is None or key != self._shared_key:
            P, _ = self._build_param_tensor({}, batch_shape)
            self._shared_P, self._shared_key = P, key
        if not overrides:
            return self._shared_P, True
        return self._override_columns(self._shared_P, overrides, batch_shape)

    def _override_columns(self, row: torch.Tensor, overrides: Mapping[str, Any],
                          batch_shape: torch.Size) -> tuple[torch.Tensor, bool]:
        """The model's own row ``(1, np)`` with the call's ``overrides`` written into their columns
        (``(B, np)`` when one is per point): what :meth:`_build_param_tensor` builds, with the
        model's own columns copied rather than rebuilt."""
        self._check_param_names(overrides)
        B = math.prod(batch_shape)
        cols = []
        for p, (a, b) in zip(self.PARAMETERS, self._param_spans()):
            if p.name in overrides:
                col, per_point = self._param_column(p, overrides[p.name], batch_shape, B)
                cols.append((a, b, col, per_point))
        shared = not any(per_point for *_, per_point in cols)
        P = row.expand(1 if shared else B, row.shape[1]).clone()
        for a, b, col, _ in cols:
            P[:, a:b] = col
        self._check_param_row(P, overrides)
        return P, shared

    def _param_spans(self) -> list[tuple[int, int]]:
        """Each parameter's columns in ``P``, in declaration order (memoised)."""
        hit = self.__dict__.get("_spans")
        if hit is None:
            hit, a = [], 0
            for p in self.PARAMETERS:
                n = _type(p.type).size
                hit.append((a, a + n))
                a += n
            self.__dict__["_spans"] = hit
        return hit

    def _param_column(self, p: ParameterInfo, v: Any, batch_shape: torch.Size, B: int) -> tuple[torch.Tensor, bool]:
        """Parameter ``p``'s columns from value ``v``: ``(1, size)`` shared or ``(B, size)`` per
        point, and which; an :class:`InputError` for a value that is not a number or tensor or
        whose shape does not fit."""
        t = _type(p.type)
        try:
            v = torch.as_tensor(v, dtype=self.dtype, device=self.device)
        except (TypeError, ValueError, RuntimeError):
            raise InputError(f"model {self.NAME}: parameter {p.name} must be a number or a tensor, "
                             f"got {type(v).__name__} {v!r:.60}") from None
        if v.dim() < t.base_dim or tuple(v.shape[v.dim() - t.base_dim:]) != t.base_shape:
            if v.dim() == 0 and t.base_dim == 1 and len(p.default or ()) == t.size:
                v = v.expand(t.size)
            else:
                raise InputError(f"model {self.NAME}: parameter {p.name} is a {p.type} (base shape "
                                 f"{t.base_shape}), got a value of shape {tuple(v.shape)}")
        pb = v.shape[: v.dim() - t.base_dim]
        if len(pb) and math.prod(pb) != 1:
            try:
                v = v.expand(*batch_shape, *t.base_shape)
            except RuntimeError:
                raise InputError(f"model {self.NAME}: parameter {p.name} has batch shape {tuple(pb)}, "
                                 f"which does not broadcast to the inputs' {tuple(batch_shape)}") from None
            return v.reshape(B, t.size), True
        return v.reshape(1, t.size), False

    def _build_param_tensor(self, overrides: Mapping[str, Any], batch_shape: torch.Size) -> tuple[torch.Tensor, bool]:
        self._check_param_names(overrides)
        cols, shared = [], True
        B = math.prod(batch_shape)
        for p in self.PARAMETERS:
            v = overrides.get(p.name, self._values.get(p.name, p.default))
            if v is None:
                raise InputError(f"model {self.NAME}: parameter {p.name} has no default; pass {p.name}=...")
            col, per_point = self._param_column(p, v, batch_shape, B)
            shared = shared and not per_point
            cols.append(col)
        if not cols:
            return torch.zeros(1, 1, dtype=self.dtype, device=self.device), True
        if not shared:
            cols = [c.expand(B, c.shape[1]) for c in cols]
        P = torch.cat(cols, dim=1).contiguous()
        self._check_param_row(P, overrides)
        return P, shared

    def _check_param_row(self, P: torch.Tensor, overrides: Mapping[str, Any]) -> None:
        """Every value in ``P (1|B, np)`` finite and inside its parameter's bounds: two comparisons
        against per-column limits (an open end is the next number of the dtype past it, so NaN and
        infinities fail too); where one fails, :func:`check_parameter` on that parameter's value
        says which and where."""
        if P.device.type == "meta":  # shapes only: no values to check
            return
        lo, hi = self._param_limits()
        with torch.no_grad():
            if bool(((P >= lo) & (P <= hi)).all()):
                return
        for p in self.PARAMETERS:
            v = torch.as_tensor(overrides.get(p.name, self._values.get(p.name, p.default)),
                                dtype=self.dtype, device=self.device)
            check_parameter(self.NAME, p.name, v, p.bounds)
        raise InternalError(f"model {self.NAME}: a parameter row failed its bounds check, but no parameter did")

    def _param_limits(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per column of ``P``, the least and the greatest value its parameter may take, in the
        model's dtype (memoised per dtype and device)."""
        key = (self.dtype, self.device)
        hit = self.__dict__.get("_limits")
        if hit is not None and hit[0] == key:
            return hit[1]
        lo, hi = [], []
        big = torch.finfo(self.dtype).max
        for p in self.PARAMETERS:
            iv = Interval.parse(p.bounds) if p.bounds else Interval(-math.inf, math.inf, False, False)
            a = torch.tensor(iv.lo, dtype=self.dtype).clamp(-big, big)
            b = torch.tensor(iv.hi, dtype=self.dtype).clamp(-big, big)
            if not iv.lo_closed and math.isfinite(iv.lo):
                a = torch.nextafter(a, torch.tensor(math.inf, dtype=self.dtype))
            if not iv.hi_closed and math.isfinite(iv.hi):
                b = torch.nextafter(b, torch.tensor(-math.inf, dtype=self.dtype))
            n = _type(p.type).size
            lo += [float(a)] * n
            hi += [float(b)] * n
        limits = tuple(torch.tensor(x, dtype=self.dtype, device=self.device) for x in (lo, hi))
        self.__dict__["_limits"] = (key, limits)
        return limits

    # -- inputs --------------------------------------------------------------------------------
    def _inputs_tensor(self, inputs) -> tuple[torch.Tensor, torch.Size]:
        """``X`` ``(B, nx)`` on the input axis (packed: a view when the inputs allow), and the batch shape."""
        views, bs = callpath.input_views(self, inputs)
        return callpath.pack(self, views, math.prod(bs)), bs

    def _check_tensor(self, what: str, v: torch.Tensor) -> None:
        if v.dtype != self.dtype:
            raise InputError(f"model {self.NAME}: {what} has dtype {v.dtype}, the model runs in {self.dtype} "
                             "(convert it, or build the model with that dtype)")
        if not callpath.same_device(v.device, self.device):  # cuda:1 is not the model's cuda:0
            raise InputError(f"model {self.NAME}: {what} is on {v.device}, the model on {self.device}")

    # -- derivative requests ---------------------------------------------------------------------
    def _axes(self, of, wrt) -> tuple[LabeledAxis, LabeledAxis]:
        """Row and column axes of the Jacobian block d ``of`` / d ``wrt`` (model order; memoised)."""
        key = (frozenset(of), frozenset(wrt))
        axes = self._axes_cache.get(key)
        if axes is None:
            rows = [(v.name, v.type) for v in self.OUTPUTS if v.name in of]
            cols = [(v.name, v.type) for v in self.INPUTS if v.name in wrt]
            # parameters after the inputs, in PARAMETERS order (the generated code's column layout)
            cols += [(p.name, p.type) for p in self.PARAMETERS if p.name in wrt and p.name not in self.input_axis]
            axes = self._axes_cache[key] = (LabeledAxis.from_variables(rows), LabeledAxis.from_variables(cols))
        return axes

    @property
    def total_axes(self) -> tuple[LabeledAxis, LabeledAxis]:
        """Rows and columns of the ``total`` variant's Jacobian: every output by every input, then
        every parameter."""
        return self._axes([v.name for v in self.OUTPUTS], [v.name for v in self.INPUTS] +
                          [p.name for p in self.PARAMETERS])

    def _derivative_request(self, derivatives):
        """``(variant, (row axis, column axis))`` for a call's ``derivatives=`` argument, or None.

        ``False``: none. ``True``: every output by every input (variant ``jacobian``). ``"tangent"``:
        the blocks the spec declares as the tangent. A list of ``(output, input)`` pairs: the rows
        of those outputs by the columns of those inputs, from the ``tangent`` variant when it covers
        them (it computes less), else from the full Jacobian. An "input" of a pair may be a
        parameter (``("state/S", "sigma_y")``): its columns follow the inputs' (variant ``total``
        unless the tangent covers it)."""
        if isinstance(derivatives, (bool, int)) or type(derivatives).__name__ == "bool_":
            if derivatives not in (0, 1):  # (3 is no answer to "which derivatives")
                raise InputError(f"model {self.NAME}: derivatives must be False, True, 'tangent', 'total' or a "
                                 f"list of (output, input) pairs, got {derivatives!r}")
            derivatives = bool(derivatives)  # 0 / 1 and numpy booleans, as before
        if derivatives is False or derivatives is None:
            return None
        if derivatives is True:
            return "jacobian", (self.output_axis, self.input_axis)
        if derivatives == "total":
            self._check_total()
            return "total", self.total_axes
        if isinstance(derivatives, str):
            if derivatives != "tangent":
                raise InputError(f"model {self.NAME}: derivatives must be False, True, 'tangent', 'total' or a "
                                 f"list of (output, input) pairs, got {derivatives!r}")
            if self.TANGENT is None:
                raise InputError(f"model {self.NAME}: its spec declares no tangent (add `tangent: {{of: [...], "
                                 "wrt: [...]}}` to the model or composition), so derivatives='tangent' has "
                                 "nothing to compute; ask for derivatives=True or a list of (output, input) pairs")
            return "tangent", self.tangent_axes
        try:
            pairs = [(str(o), str(i)) for o, i in derivatives]
        except (TypeError, ValueError):
            raise InputError(f"model {self.NAME}: derivatives must be False, True, 'tangent', 'total' or a list "
                             f"of (output, input or parameter) pairs, got {derivatives!r}") from None
        if not pairs:
            raise InputError(f"model {self.NAME}: derivatives=[] asks for no derivative; pass False")
        bad = [o for o, _ in pairs if o not in self.output_axis] + \
            [i for _, i in pairs if i not in self.input_axis and i not in self.parameter_info]
        if bad:
            raise InputError(f"model {self.NAME}: derivatives names {', '.join(dict.fromkeys(bad))}, not among "
                             f"its outputs ({', '.join(self.output_axis.variable_names)}), inputs "
                             f"({', '.join(self.input_axis.variable_names)}) or parameters "
                             f"({', '.join(self.parameter_info) or 'none'})")
        of, wrt = {o for o, _ in pairs}, {i for _, i in pairs}
        axes = self._axes(of, wrt)
        if self.TANGENT is not None and of <= set(self.TANGENT[0]) and wrt <= set(self.TANGENT[1]):
            return "tangent", axes
        if any(i not in self.input_axis for i in wrt):
            self._check_total()
            return "total", axes
        return "jacobian", axes

    def _check_total(self) -> None:
        """An InputError when this generated module has no ``total`` variant (it predates it)."""
        if "total" not in self.VARIANTS or (self.backend == "c" and "total" not in self._loaded_clib().variants):
            raise InputError(f"model {self.NAME}: this generated module computes no derivatives with respect "
                             "to parameters (it predates them): regenerate it with `modelc compile`")

    # -- Newton options --------------------------------------------------------------------------
    def set_solver(self, **options) -> "CompiledModel":
        """Newton options of this object (``rtol``, ``atol``, ``max_iter``; None: back to the spec's),
        used by every call that does not give its own (:mod:`modelc.runtime.solver`)."""
        new = _solver.check(options, f"model {self.NAME}")
        self._solver = {k: v for k, v in {**self._solver, **new}.items()
                        if options.get(k, v) is not None}
        return self

    def solver_options(self) -> dict[str, Any]:
        """The Newton options set on this object (:meth:`set_solver`; what is absent is the spec's)."""
        return dict(self._solver)

    def solver_info(self) -> dict[str, Any]:
        """What a call uses now: each Newton option's value and whether it comes from the spec, the
        model object or the call (empty for an explicit model)."""
        if not self.IMPLICIT:
            return {}
        spec = {k: self.SOLVER[k] for k in _solver.KEYS if k in self.SOLVER}
        return _solver.info(spec, self._solver, self._call_solver)

    def _solver_triple(self) -> tuple[float, float, int]:
        return _solver.triple({**self._solver, **self._call_solver})

    # -- evaluation ----------------------------------------------------------------------------
    def __call__(self, inputs, derivatives=False, *, old_forces: Mapping[str, Any] | None = None,
                 out: Result | None = None, solver: Mapping[str, Any] | None = None,
                 **param_overrides) -> Result:
        """Evaluate on ``inputs``; ``old_forces`` gives previous force values for sub-stepping when
        the model has no ``old_forces/`` input of its own.

        ``derivatives``: ``False`` (none), ``True`` (every output by every input), ``"total"`` (every
        output by every input, then every parameter), ``"tangent"`` (the
        blocks the spec declares as the model's tangent, computed by a variant that does only that)
        or a list of ``(output, input)`` pairs such as ``[("state/S", "forces/E")]`` (those rows by
        those columns; the tangent variant runs when it covers them). ``result.jacobian`` is a
        :class:`~modelc.runtime.labeled.LabeledMatrix` over the requested rows and columns. A
        Jacobian that depends on the parameters only (``CONSTANT_JACOBIAN``, e.g. linear
        elasticity) is computed for one point and returned broadcast over the batch (a stride-0
        view: ``.clone()`` it before writing into it) when the parameters are shared.

        Inputs and parameters may be :class:`~modelc.runtime.tensors.TypedTensor` s with named batch
        dims: they are aligned and broadcast by name (a parameter batched over ``samples`` meets
        strains batched over ``points``), and the result is batched over the union of the names, in
        first-seen order (``result.batch_names``).

        Inputs are read where they lie (no packing on the C backend; see docs/backends.md).
        ``out``: an earlier result of this model (same batch shape, dtype, device and kind of
        derivatives); the outputs, Jacobian and status are written into its storage and ``out`` is
        returned. A mismatch is an :class:`InputError` and nothing is written.

        ``solver``: Newton options for this call (``rtol``, ``atol``, ``max_iter``), over the object's
        (:meth:`set_solver`) and the spec's (:mod:`modelc.runtime.solver`)."""
        key = None
        if type(inputs) is dict and solver is None and self.backend in ("c", "triton") and \
                all(type(v) in _PLAIN for v in param_overrides.values()):
            key = self._plan_key(inputs, derivatives)
            plan = None if key is None else self._plans.get(key)
            if plan is not None:
                result = self._run_plan(plan, inputs, out, param_overrides)
                if result is not None:
                    return result
        options = _solver.check(solver, f"model {self.NAME}: solver=")
        inputs, param_overrides, names = self._align_named(inputs, param_overrides)
        # (a plain attribute: set through __dict__, past nn.Module.__setattr__'s checks, ~3 us each)
        saved, self.__dict__["_call_solver"] = self._call_solver, options
        try:
            if torch.is_grad_enabled() and autograd.requires_grad(self, inputs, param_overrides):
                result = autograd.call(self, inputs, derivatives, old_forces, param_overrides, out)
            else:
                result = self._call(inputs, derivatives, old_forces, param_overrides, out)
        finally:
            self.__dict__["_call_solver"] = saved
        result.batch_names = names
        if key is not None and key not in self._plans:  # the next call with such inputs: planned
            if len(self._plans) >= _PLANS:
                self._plans.clear()
            self._plans[key] = callpath.plan(self, inputs, self._derivative_request(derivatives))
        return result

    def _plan_key(self, inputs: dict, derivatives) -> tuple | None:
        """The key of a planned call (``callpath.signature``, with what else decides the plan), or
        None when this call takes the regular path."""
        sig = callpath.signature(self, inputs)
        if sig is None:
            return None
        if derivatives is None or type(derivatives) in (bool, str):
            key = derivatives
        elif isinstance(derivatives, (list, tuple)):
            try:
                key = tuple(map(tuple, derivatives))
                hash(key)
            except TypeError:  # pairs that are not pairs of names: the regular call says what is wrong
                return None
        else:
            return None
        return (key, self.backend, self.dtype, sig)

    def _run_plan(self, plan: callpath.Plan, inputs: dict, out: Result | None,
                  overrides: Mapping[str, Any] = {}) -> Result | None:
        """A call with the inputs of an earlier, checked call of the same kind (``plan``): straight to
        the C entry point (or the Triton launch, on views made as the checked path made them), into
        fresh buffers or ``out``'s (checked as the regular call checks them: a mismatch is its
        error, nothing written), as ``_call`` would run it but skipping what it checked then (same
        numbers, same result). A Jacobian that depends on the parameters only is computed for one
        point and broadcast, as there. None when the call must take the regular path after all: the
        parameters require grad now, the inputs need the host's NaN check (a constant Jacobian with
        per-point parameters), or points failed that ``on_failure="substep"`` sub-steps (the regular
        call then evaluates again)."""
        P, shared = self._param_tensor(overrides, plan.bs)
        if P.requires_grad and torch.is_grad_enabled():
            return None
        B = math.prod(plan.bs)
        constant = plan.constant and shared and B > 1
        marks = (self.C_MARKS_NONFINITE if self.backend == "c" else True) and not constant  # (as _call)
        if (self.IMPLICIT or not self.CONSTANT_JACOBIAN) and not marks:
            return None
        if out is not None:
            buf = callpath.out_buffers(self, out, plan.bs, plan.axes)
        else:
            buf = callpath.allocate(self, B, None if constant else plan.jshape)
        J = buf.J
        if self.backend == "triton":
            _, J, _ = self._run_into(plan.views(inputs), P, plan.variant, buf, shared, overrides)
            if buf.status is not None and self.on_failure == "substep" and not bool(buf.status[0].all()):
                return None
        elif B:
            lib, opts, threads = self._c_library(P), self._solver_triple(), torch.get_num_threads()
            words = plan.words(inputs)
            lib.run("value" if constant else plan.variant or "value", B,
                    pack_tail(words, plan.moved, P, buf.Y, None if constant else J, buf.status, opts), threads)
            if buf.status is not None and self.on_failure == "substep" and not bool(buf.status[0].all()):
                return None
            if constant:  # the first point's Jacobian (rows 0 of the same inputs), broadcast
                one = J[:1] if J is not None and J.stride(0) == 0 else \
                    torch.empty(1, *plan.jshape, dtype=self.dtype, device=self.device)
                scratch = torch.empty_like(buf.Y[:1])  # (held here: the kernel writes into it)
                lib.run(plan.variant, 1, pack_tail(words, 0, P, scratch, one, None, opts), threads)
                if J is None:
                    J = one.expand(B, *one.shape[1:])
                elif J.stride(0) != 0:
                    J.copy_(one.expand(B, *one.shape[1:]))
        if out is None:
            return self._result(buf.Y, J, buf.status, plan.bs, plan.axes)
        if out.status is not None and out.status.substeps is not None:  # (as the regular call leaves it)
            out.status = Status(out.status.converged, out.status.iterations, out.status.residual_norm, None)
        return out

    def _result(self, Y, J, status, bs: torch.Size, axes, substeps=None) -> Result:
        """The :class:`Result` over flat buffers ``Y (B, ny)``, ``J (B, rows, cols)`` (over ``axes``;
        or None) and ``status`` (or None) of a call over batch shape ``bs``: views, no copies."""
        flat = len(bs) == 1  # (B,): the buffers have the batch shape already
        jac = None
        if J is not None:
            jac = LabeledMatrix.trusted(J if flat else J.reshape(*bs, *J.shape[-2:]), axes)
        st = None
        if status is not None:
            st = Status(*(t if flat else t.reshape(bs) for t in status),
                        None if substeps is None else substeps.reshape(bs))
        result = Result(LabeledVector.trusted(Y if flat else Y.reshape(*bs, Y.shape[-1]), (self.output_axis,)),
                        jac, st)
        result.producer = (self.NAME, self.SPEC_HASH)
        return result

    def bind(self, inputs, derivatives=False, *, solver: Mapping[str, Any] | None = None,
             **param_overrides) -> "BoundCall":
        """A call bound to ``inputs``' tensors: ``bound()`` evaluates again on whatever they hold
        now (write new values into them in place) and writes into the same result, for hosts that
        evaluate the same batch every step. On the C backend it goes straight to the kernel (see
        :mod:`modelc.runtime.bound`); its numbers are always those of
        ``self(inputs, derivatives, out=bound.result, ...)``."""
        from modelc.runtime.bound import BoundCall

        return BoundCall(self, inputs, derivatives, solver, param_overrides)

    def release_buffers(self) -> None:
        """Give back the result blocks the model keeps for reuse on the CPU (``reuse_outputs``): the
        free ones now, those an earlier result still uses when it dies. Later calls start afresh."""
        if self._pool is not None:
            self._pool.release()

    def _align_named(self, inputs, params):
        """Replace named TypedTensors by plain tensors aligned to the union of their batch names."""
        from modelc.runtime.tensors import TypedTensor, broadcast_batch

        values = {**(inputs if isinstance(inputs, Mapping) else {}), **params}
        typed = {k: v for k, v in values.items() if isinstance(v, TypedTensor)}
        if not typed:
            return inputs, params, None
        names, shape = broadcast_batch(*typed.values())
        # every named operand expanded (a view) to the full named batch shape
        plain = {k: (v.data if names is None else v.align_to(names, shape).data) for k, v in typed.items()}
        if names is not None:
            for k, v in values.items():
                if isinstance(v, torch.Tensor) and k not in typed and v.dim() > _type_dim(self, k):
                    raise InputError(f"model {self.NAME}: {k} has unnamed batch dims while other inputs are "
                                     f"batched over named dims {names}; name it with TypedTensor(..., "
                                     "batch_names=...)")
        if isinstance(inputs, Mapping):
            inputs = {k: plain.get(k, v) for k, v in inputs.items()}
        params = {k: plain.get(k, v) for k, v in params.items()}
        return inputs, params, names

    def _call(self, inputs, derivatives, old_forces, param_overrides, out=None) -> Result:
        request = self._derivative_request(derivatives)
        variant = request[0] if request else None
        views, bs = callpath.input_views(self, inputs)
        P, shared = self._param_tensor(param_overrides, bs)
        B = math.prod(bs)
        vaxes = self._variant_axes(variant)
        target = None if out is None else callpath.out_buffers(self, out, bs, None if request is None else request[1])
        narrow = request is not None and vaxes != request[1]  # a block of the variant's Jacobian
        in_kernel = False  # whether the C kernel marked the points with NaN or infinite inputs
        if self.backend in ("c", "triton") and (target is None or not narrow):
            # the kernel reads the inputs where they lie and writes into fresh buffers or out='s
            constant = variant in self.CONSTANT_JACOBIAN and shared and B > 1
            in_kernel = (self.C_MARKS_NONFINITE if self.backend == "c" else True) and not constant
            buf = target if target is not None else callpath.allocate(
                self, B, None if constant else self._jacobian_shape(variant))
            if buf.J is None and variant is not None and not constant:
                raise InternalError(f"model {self.NAME}: no Jacobian buffer for a {variant} call")
            try:
                Y, J, status = self._run_into(views, P, variant, buf, shared, param_overrides)
            except CBuildError as exc:
                # a library built at the call (the jacobian/total part, a new exponent's) did not
                # build: an automatic backend falls back as it does when the model is made; nothing
                # was written (the kernel never ran)
                if self.backend != "c" or self._requested_backend != "auto":
                    raise
                self.backend = self._c_unavailable(str(exc))
                return self._call(inputs, derivatives, old_forces, param_overrides, out)
        else:
            Y, J, status = self._run_packed(callpath.pack(self, views, B), P, variant, shared, param_overrides)
        substeps = None
        if status is not None and self.on_failure == "substep" and not bool(status[0].all()):
            X = callpath.pack(self, views, B)
            ST = torch.stack([status[0].to(Y.dtype), status[1].to(Y.dtype), status[2]], dim=1)
            if variant == "tangent":
                Y, J, ST, substeps = substep_tangent(self, X, P, Y, J, ST, shared, param_overrides, old_forces)
            else:
                Y, J, ST, substeps = substep(self, X, P, Y, J, ST, variant, shared, param_overrides, old_forces)
            status = (ST[:, 0] > 0.5, ST[:, 1].round().to(torch.int32), ST[:, 2].contiguous())
        # NaN or infinite inputs: those points are failed, never a plausible number. An affine model
        # (constant Jacobian: outputs = A(P) inputs + b(P)) propagates NaN by itself: no check. The C
        # kernel checks the inputs it has loaded anyway (a sum over 12 MB per 1e5 points saved).
        if (self.IMPLICIT or not self.CONSTANT_JACOBIAN) and not (in_kernel and substeps is None):
            bad = _nonfinite_points(views, B)
            if bad is not None:
                Y, J, status = _fail_points(bad, Y, J, status)
        result = self._result(Y, J, status, bs, vaxes, substeps)
        if narrow:
            result._jacobian = sub_matrix(result._jacobian, *request[1])
        if target is not None:  # write into out's storage (what was computed elsewhere is copied)
            jac = result._jacobian
            _copy_into(target, Y, None if jac is None else jac.tensor.reshape(B, *jac.tensor.shape[-2:]), status)
            if out.status is not None and (substeps is not None or out.status.substeps is not None):
                out.status = Status(out.status.converged, out.status.iterations, out.status.residual_norm,
                                    None if substeps is None else substeps.reshape(bs))
            return out
        return result

    def _run_into(self, views, P, variant, buf: callpath.Buffers, shared: bool, overrides):
        """The C entry point or the Triton kernel of ``variant`` over ``views`` into ``buf``; returns
        ``(Y, J, status)``. A Jacobian that depends on the parameters only (``CONSTANT_JACOBIAN``) is
        computed for one point when they are shared: returned broadcast (a stride-0 view) unless
        ``buf`` has a full one."""
        B = buf.Y.shape[0]
        J = buf.J
        if B == 0:
            return buf.Y, J, buf.status
        if self.backend == "c":
            lib, threads, opts = self._c_library(P), torch.get_num_threads(), self._solver_triple()

            def run(v, vs, Y, J, status):
                lib.run(v or "value", Y.shape[0], pack_args(vs, P, Y, J, status, opts), threads)
        else:
            def run(v, vs, Y, J, status):
                self._launch_into(vs, P, Y, J, status, v, shared, overrides)
        if not (variant in self.CONSTANT_JACOBIAN and shared and B > 1):
            run(variant, views, buf.Y, J, buf.status)
            return buf.Y, J, buf.status
        run(None, views, buf.Y, None, buf.status)
        one, scratch = [v[:1] for v in views], torch.empty_like(buf.Y[:1])
        if J is not None and J.stride(0) == 0:  # out= holds the broadcast: write its one point
            run(variant, one, scratch, J[:1], None)
            return buf.Y, J, buf.status
        J1 = torch.empty(1, *self._jacobian_shape(variant), dtype=self.dtype, device=self.device)
        run(variant, one, scratch, J1, None)
        if J is None:
            return buf.Y, J1.expand(B, *J1.shape[1:]), buf.status
        J.copy_(J1.expand(B, *J1.shape[1:]))
        return buf.Y, J, buf.status

    def _c_library(self, P: torch.Tensor):
        """The C library for a call with parameter rows ``P``: the module's own, or, when parameters
        are baked (the module's ``BAKED``, or ``bake=``: :attr:`c_baked`), the one built with their
        values in ``P`` as constants (one library per set of values, cached in memory and on disk;
        the first call with new values compiles). With ``specialize`` (the default), the
        ``EXPONENTS`` whose value is an integer ``|k| <= 63`` shared by every point are baked too:
        their powers become binary powering (:meth:`_specialized_columns`). The choice made for the
        model's own shared row (``_shared_P``, unchanged since) is remembered: reading the row's
        values back costs ~13 us a call."""
        memo = self.__dict__.get("_c_lib_memo")
        if memo is not None and memo[0] is P and memo[1] == P._version and memo[2] is self.c_baked:
            return memo[3]
        lib = self._choose_c_library(P)
        if P is self._shared_P and not P.is_inference():  # (inference tensors have no version counter)
            self.__dict__["_c_lib_memo"] = (P, P._version, self.c_baked, lib)
        return lib

    def _choose_c_library(self, P: torch.Tensor):
        auto = self._specialized_columns(P)
        if not self.c_baked and not auto:
            return self._general_lib()
        cols = self._baked_columns()
        if P.shape[0] > 1 and cols:
            uniform = (P[:, cols] == P[:1, cols]).all(dim=0)
            if not bool(uniform.all()):
                name = self.param_names_by_column()[cols[int((~uniform).nonzero()[0])]]
                raise InputError(f"model {self.NAME}: parameter {name} is baked into the kernel and must "
                                 "be one shared value, got different values per point")
        row = P[0].tolist()
        chosen = set(cols) | set(auto)
        baked = tuple(row[c] if c in chosen else None for c in range(len(row)))
        lib = self._baked_libs.get(baked)
        if lib is None:
            from modelc.runtime.cbuild import load_library

            if not cols and len(self._baked_libs) >= MAX_SPECIALIZED:  # a sweep over many values
                return self._general_lib()
            lib = self._baked_libs[baked] = load_library(self.c_source, self.NAME, self.dtype, baked=baked)
        return lib

    def _specialized_columns(self, P: torch.Tensor) -> list[int]:
        """The parameter columns of ``P`` that exponent specialization bakes for this call: those of
        the ``EXPONENTS`` (not already baked) when ``specialize`` is on, ``P`` is one row for every
        point and their values are integers ``|k| <= 63`` (what the C source's binary powering
        takes, ``MC_CONST_INT``); else none. Per-point parameter rows are not scanned."""
        if not (self.specialize and self.EXPONENTS) or P.shape[0] != 1:
            return []
        cols = self._exponent_columns
        values = P[0, cols].tolist() if cols else []
        return [c for c, v in zip(cols, values) if math.isfinite(v) and v == int(v) and abs(v) <= 63]

    def _baked_columns(self) -> list[int]:
        """The parameter columns (``P``'s) of the parameters the C library bakes in."""
        names = self.param_names_by_column()
        return [c for c, n in enumerate(names) if n in self.c_baked]

    def param_names_by_column(self) -> list[str]:
        """The parameter each column of a parameter row ``P`` belongs to."""
        return [p.name for p in self.PARAMETERS for _ in range(_type(p.type).size)]

    def _run_packed(self, X, P, variant, shared, overrides):
        """The PyTorch and Triton backends (and the C backend for a narrower Jacobian into out=)."""
        if variant in self.CONSTANT_JACOBIAN and shared and X.shape[0] > 1:
            # the same matrix at every point: computed once, returned broadcast (a stride-0 view)
            Y, _, ST = self.evaluate(X, P, False, shared=shared, overrides=overrides)
            J1 = self.evaluate(X[:1], P, variant, shared=shared, overrides=overrides)[1]
            J = J1.expand(X.shape[0], *J1.shape[1:])
        else:
            Y, J, ST = self.evaluate(X, P, variant, shared=shared, overrides=overrides)
        status = None if ST is None else (ST[:, 0] > 0.5, ST[:, 1].round().to(torch.int32), ST[:, 2].contiguous())
        return Y, J, status

    def evaluate(self, X: torch.Tensor, P: torch.Tensor, derivatives, *, shared: bool = True,
                 overrides: Mapping[str, Any] | None = None):
        """Raw entry: ``X (B, nx)``, ``P (1|B, np)`` -> ``(Y, J or None, ST or None)``.

        ``derivatives``: False, True or ``"jacobian"`` (``J (B, ny, nx)``), or ``"tangent"`` (``J`` over
        :attr:`tangent_axes`, from the tangent variant)."""
        variant = self._variant(derivatives)
        if self.backend == "torch":
            return self.torch_eval(X, P, self.VARIANTS[variant or "value"], self._solver_triple())
        if self.backend == "c":
            return self._run_c(X, P, variant)
        return self._launch(X, P, variant, shared, overrides or {})

    def _variant(self, derivatives) -> str | None:
        if derivatives == "tangent":
            if self.TANGENT is None:
                raise InputError(f"model {self.NAME}: no tangent variant (the spec declares no tangent)")
            return "tangent"
        if derivatives in ("jacobian", "total"):
            if derivatives == "total":
                self._check_total()
            return derivatives
        if derivatives not in (True, False, None):
            raise InputError(f"model {self.NAME}: evaluate() takes derivatives=False, True, 'jacobian', "
                             f"'tangent' or 'total', got {derivatives!r}")
        return "jacobian" if derivatives else None

    def _variant_axes(self, variant: str | None) -> tuple[LabeledAxis, LabeledAxis] | None:
        """Rows and columns of the Jacobian a variant computes (None for ``value``)."""
        if variant is None:
            return None
        if variant == "jacobian":
            return self.output_axis, self.input_axis
        return self.tangent_axes if variant == "tangent" else self.total_axes

    def _jacobian_shape(self, variant: str | None) -> tuple[int, int] | None:
        if variant is None:
            return None
        if variant in ("tangent", "total"):
            axes = self.tangent_axes if variant == "tangent" else self.total_axes
            return axes[0].size, axes[1].size
        return self.output_axis.size, self.input_axis.size

    def _run_c(self, X, P, variant):
        """``(Y, J, ST)`` of the C backend for a packed ``X`` (the raw :meth:`evaluate` entry)."""
        B = X.shape[0]
        X = X if X.stride(-1) == 1 else X.contiguous()
        buf = callpath.allocate(self, B, self._jacobian_shape(variant))
        if B:
            self._c_library(P)(callpath.split(self, X), P.contiguous(), buf.Y, buf.J, buf.status, variant=variant or "value",
                       options=self._solver_triple())
        ST = None
        if buf.status is not None:
            ST = torch.stack([buf.status[0].to(self.dtype), buf.status[1].to(self.dtype), buf.status[2]], dim=1)
        return buf.Y, buf.J, ST

    def _launch(self, X, P, variant, shared, overrides):
        """``(Y, J, ST)`` of the Triton kernel for a packed ``X`` (the raw :meth:`evaluate` entry)."""
        X = X if X.stride(-1) == 1 else X.contiguous()
        buf = callpath.allocate(self, X.shape[0], self._jacobian_shape(variant))
        self._launch_into(callpath.split(self, X), P, buf.Y, buf.J, buf.status, variant, shared, overrides)
        ST = None
        if buf.status is not None:
            ST = torch.stack([buf.status[0].to(self.dtype), buf.status[1].to(self.dtype), buf.status[2]], dim=1)
        return buf.Y, buf.J, ST

    def _launch_into(self, views, P, Y, J, status, variant, shared, overrides, options=None) -> None:
        """The Triton kernel of ``variant``: inputs read from ``views`` (one ``(B or 1, size)`` tensor
        per input variable, unit column stride), outputs into ``Y``, ``J`` and ``status``
        (``(converged, iterations, residual_norm)``, or None: scratch for an implicit model);
        ``options``: the Newton options triple (default: the call's, :meth:`_solver_triple`)."""
        import triton
        import triton.language as tl

        # (checked before anything is allocated or written)
        launch = triton_launch_options(float64_register_cap(self, variant) if self.dtype == torch.float64 else None)
        B = Y.shape[0]
        if B == 0:
            return
        consts = {}
        for name, args in self.BAKED_ARGS:
            v = overrides.get(name, self._values.get(name, self.parameter_info[name].default))
            v = torch.as_tensor(v, dtype=torch.float64).reshape(-1)
            if v.numel() != len(args):
                raise InputError(f"model {self.NAME}: parameter {name} is baked into the kernel and must "
                                 f"be one shared value, got {v.numel() // max(len(args), 1)} values")
            consts.update({a: float(x) for a, x in zip(args, v.tolist())})
        if self.IMPLICIT and status is None:
            status = (torch.empty(B, dtype=torch.bool, device=self.device),
                      torch.empty(B, dtype=torch.int32, device=self.device),
                      torch.empty(B, dtype=self.dtype, device=self.device))
        cv, it, rn = status if status is not None else (Y, Y, Y)  # (explicit kernels store no status)
        block = self.block or (min(4096, triton.next_power_of_2(B)) if interpreting() else 128)
        grid = (triton.cdiv(B, block),)
        self.kernel[grid](*views, P, Y, J if J is not None else Y, cv, it, rn, self._options_tensor(options), B,
                          *(v.stride(0) for v in views), 0 if shared else P.stride(0), Y.stride(0),
                          J.stride(0) if J is not None else 0, 0, **consts, V=self.VARIANTS[variant or "value"],
                          DTYPE=tl.float64 if self.dtype == torch.float64 else tl.float32,
                          EPS=torch.finfo(self.dtype).eps, BLOCK=block, P_SHARED=bool(shared), **launch)
        if self.TRITON_RETRY:
            self._retry_failed(views, P, Y, J, (cv, it, rn), variant, shared, options)

    def _retry_failed(self, views, P, Y, J, status, variant, shared, options) -> None:
        """Solve the points the Triton kernel reported as not converged again with the generated
        PyTorch code (from the guess, LAPACK's partially pivoted LU for the Newton step) and write
        those it converges into ``Y``, ``J`` and ``status``; the others stay as the kernel left them
        (NaN, not converged). The kernel's step pivots statically where that is safe and guards the
        pivots at risk; far from the solution a guarded pivot can still cancel (4 of 20,000 random
        gtn points), where partial pivoting converges. So can the tangent's elimination at a
        converged point: a derivative row with a NaN is solved again too (j2_voce_af_coupled in
        float32 at a deviator of 1e-19, where an entry of 1e15 the pivot's row holds trips the guard;
        tests/models/test_tiny_deviator.py). Costs one device synchronisation per call (to find the
        failed points) and, when there are some, a PyTorch call on those points only."""
        cv, it, rn = status
        redo = ~cv
        if J is not None:  # (a NaN derivative of a converged point: the kernel's elimination guard)
            redo = redo | ~torch.isfinite(J.reshape(J.shape[0], -1)).all(dim=1)
        if not bool(redo.any()):  # (the one synchronisation of a call where every point converged)
            return
        fail = torch.nonzero(redo).flatten()
        n = fail.numel()
        X = callpath.pack(self, [v.expand(n, -1) if v.shape[0] == 1 else v[fail] for v in views], n)
        Pf = P if shared or P.shape[0] == 1 else P[fail]
        bad = _nonfinite_points([X], n)  # (the kernel failed those on purpose; parameters are checked)
        if bad is not None:
            keep = ~bad
            fail, X, Pf = fail[keep], X[keep], Pf if Pf.shape[0] == 1 else Pf[keep]
            if fail.numel() == 0:
                return
        Yf, Jf, STf = self.torch_eval(X, Pf, self.VARIANTS[variant or "value"],
                                      tuple(options) if options is not None else self._solver_triple())
        ok = STf[:, 0] > 0.5
        if not bool(ok.any()):
            return
        idx, sel = fail[ok], torch.nonzero(ok).flatten()
        Y[idx] = Yf[sel]
        if J is not None and Jf is not None:
            J[idx] = Jf[sel]
        cv[idx] = True
        it[idx] = STf[sel, 1].round().to(it.dtype)
        rn[idx] = STf[sel, 2].to(rn.dtype)

    def _options_tensor(self, options=None) -> torch.Tensor:
        """The Newton options (rtol, atol, max_iter; negative: the spec's; default: the call's) as the
        kernel reads them, on the model's device: made once per set of options (a host-to-device
        copy per call would wait for the GPU)."""
        key = (tuple(options) if options is not None else self._solver_triple(), self.dtype, str(self.device))
        cache = self.__dict__.setdefault("_options_tensors", {})
        O = cache.get(key)
        if O is None:
            O = cache[key] = torch.tensor(key[0], dtype=self.dtype, device=self.device)
        return O

    # -- stepping helpers ----------------------------------------------------------------------
    def initial_values(self, batch: int | tuple[int, ...] = (), **params) -> dict[str, torch.Tensor]:
        """The declared initial value of every state variable that has one (``state/x`` -> a tensor
        of shape ``batch`` + base shape), from the model's parameters (its own values, overridden by
        ``params``: a number, or one value per point of ``batch``). Undeclared state starts at zero."""
        if not self.INITIAL:
            return {}
        bs = torch.Size((batch,) if isinstance(batch, int) else tuple(batch))
        P, _ = self._param_tensor(params, bs)
        Y, _, _ = self.torch_initial(torch.empty(P.shape[0], 0, dtype=self.dtype, device=self.device), P)
        axis = LabeledAxis.from_variables([(v.name, v.type) for v in self.INITIAL])
        out = {}
        for v in self.INITIAL:
            a, b = axis.span(v.name)
            base = _type(v.type).base_shape
            out[v.name] = Y[:, a:b].expand(math.prod(bs), b - a).reshape(*bs, *base).clone()
        return out

    def initial_state(self, batch: int | tuple[int, ...] = (), *, state: Mapping[str, Any] | None = None,
                      **params) -> dict[str, torch.Tensor]:
        """Inputs for a first step (the model's dtype and device, shape ``batch`` + base shape for every
        input): zero strain, time and old forces; every ``old_state/x`` starts at the declared initial
        value of ``state/x`` (:meth:`initial_values`, with ``params`` overriding parameters), else
        zero. ``state`` gives explicit initial values instead (``state/x`` or ``old_state/x`` ->
        one value, or one per point). Write the step's ``forces/...`` into it, call the model, then
        :meth:`advance`."""
        bs = (batch,) if isinstance(batch, int) else tuple(batch)
        out = {v.name: torch.zeros(*bs, *_type(v.type).base_shape, dtype=self.dtype, device=self.device)
               for v in self.INPUTS}
        olds = dict(self.STATE)
        for new, v in self.initial_values(bs, **params).items():
            if new in olds:
                out[olds[new]] = v
        for name, value in (state or {}).items():
            old = olds.get(name, name if name in olds.values() else None)
            if old is None:
                raise InputError(f"model {self.NAME}: initial state {name!r} is not one of its state "
                                 f"variables ({', '.join(n for n, _ in self.STATE) or 'none'})")
            shape = out[old].shape
            v = torch.as_tensor(value, dtype=self.dtype, device=self.device)
            try:
                out[old] = v.expand(shape).clone()
            except RuntimeError:
                raise InputError(f"model {self.NAME}: initial state {name!r} has shape {tuple(v.shape)}, "
                                 f"which does not broadcast to {tuple(shape)} (batch + base shape)") from None
        return out

    def advance(self, inputs: Mapping[str, Any], result: Result) -> dict[str, torch.Tensor]:
        """The inputs of the next step after a converged one: ``old_state/x`` takes the result's
        ``state/x``, ``old_forces/x`` the inputs' ``forces/x``; everything else is carried over (write
        the new forces before the next call). The tensors are new; ``inputs`` is not modified."""
        out = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()}
        for new, old in self.STATE:
            out[old] = result[new].clone()
        for name in list(out):
            if name.startswith("old_forces/") and name[4:] in inputs:
                v = inputs[name[4:]]
                out[name] = v.clone() if isinstance(v, torch.Tensor) else v
        return out

    # -- description ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__module__}.Model({self.NAME!r}, {self.dtype}, {self.device}, backend={self.backend!r})"

    def describe(self) -> str:
        lines = [f"model {self.NAME} (from {self.SOURCE})" + ("  [implicit]" if self.IMPLICIT else ""),
                 "inputs:", str(self.input_axis), "outputs:", str(self.output_axis), "parameters:"]
        lines += [f"  {p}" for p in self.PARAMETERS] or ["  (none)"]
        return "\n".join(lines)
