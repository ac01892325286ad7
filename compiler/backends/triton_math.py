"""Triton spellings of the elementary functions of :mod:`modelc.functions` that Triton only offers
through libdevice (which does not run under TRITON_INTERPRET): ``@triton.jit`` helpers written with
``tl.exp``/``tl.log``/``tl.sqrt`` only, emitted into a generated module only when a kernel calls them;
and the functions whose inline spelling would name an argument twice (``sign``, ``max_``, ``min_``,
``safe_div``), so that a nested argument is printed once.

Accuracy (the derivations; tests compare with NumPy in float64 and float32):

- ``_mc_expm1``: Kahan's ``(u - 1) * x / log(u)`` with ``u = exp(x)``: the rounding error of ``u``
  cancels between numerator and denominator, so small ``x`` keeps full relative accuracy; ``x``
  when ``u == 1``, -1 when ``u - 1 == -1``, ``u`` when it is inf or NaN.
- ``_mc_log1p``: the same trick, ``log(u) * x / (u - 1)`` with ``u = 1 + x``.
- ``_mc_sinh`` = ``0.5 (v + v / (v + 1))``, ``v = expm1(|x|)``, odd; ``_mc_cosh`` = ``0.5 (e + 1/e)``;
  ``_mc_tanh`` = ``v / (v + 2)``, ``v = expm1(2|x|)``, exactly +-1 for |x| > 20.
- ``_mc_asinh`` = ``log1p(|x| + x^2 / (1 + sqrt(1 + x^2)))``, ``log(2|x|)`` for |x| > 1e8 (x^2 would
  overflow for huge x), odd; ``_mc_acosh`` = ``log1p(t + sqrt(2t + t^2))``, ``t = x - 1`` (NaN for
  x < 1), ``log(2x)`` for x > 1e8; ``_mc_atanh`` = ``0.5 log1p(2x / (1 - x))`` for x >= 0, odd.
- ``_mc_atan2`` from ``_mc_atan``: Cephes' atan (reduction to |t| <= 0.66 by t -> -1/t or
  (t - 1)/(t + 1), a 4/5 rational approximation, the low bits of pi/2 added back), then the
  quadrant; ``atan2(0, 0) = 0``, ``atan2(+0, x < 0) = pi``.

NaN: no helper clamps with ``tl.minimum``/``tl.maximum``. On the GPU they compile to ``min``/``max``
instructions that return the non-NaN operand, while the interpreter's NumPy keeps the NaN, so the
tests could not see a NaN turned into a number (``asinh(nan)`` was ``log(2e8)`` on the GPU); a clamp is
a ``tl.where`` on a comparison, false for NaN, which keeps it.

Constants go through ``tl.full([], value, x.dtype)`` so a float64 kernel keeps float64 constants (a
bare Python float is an fp32 constant in a kernel).
"""
from __future__ import annotations

import re

#: name -> (helpers it calls, source); the sources are indented for the generated module's
#: ``if triton is not None:`` block by the template
HELPERS: dict[str, tuple[tuple[str, ...], str]] = {
    # functions whose inline spelling would name an argument twice (the source would double at
    # each level of nesting): one call each, inlined by Triton
    "_mc_sign": ((), '''
@triton.jit
def _mc_sign(x):
    return tl.where(x > 0.0, 1.0, tl.where(x < 0.0, -1.0, 0.0))
'''),
    # macaulay: max(x, 0) that keeps a NaN, as C's mc_pos and torch.clamp do (tl.maximum compiles to
    # max.f64, which returns the non-NaN operand on the GPU, while the interpreter's np.maximum keeps
    # it: a NaN yield function was a plausible 0 on the GPU only)
    "_mc_pos": ((), '''
@triton.jit
def _mc_pos(x):
    return tl.where(x < 0.0, 0.0, x)
'''),
    "_mc_ge": ((), '''
@triton.jit
def _mc_ge(a, b):
    return tl.where(a >= b, a, tl.where(a < b, b, a + b))
'''),
    "_mc_le": ((), '''
@triton.jit
def _mc_le(a, b):
    return tl.where(a <= b, a, tl.where(a > b, b, a + b))
'''),
    "_mc_sdiv": ((), '''
@triton.jit
def _mc_sdiv(a, b):
    nz = b != 0.0
    return tl.where(nz, a / tl.where(nz, b, 1.0), 0.0)
'''),
    # a power whose exponent is known when the kernel is compiled (an expression of baked
    # parameters, a constexpr): an integer |K| <= 2047 by binary powering, at most 20 multiplications
    # (relative error <= |K| 2^-53 to first order; a negative base keeps the sign of x^K, as
    # torch.pow and the C backend do), else exp(K log x) like the runtime exponent
    "_mc_powu": ((), '''
@triton.jit
def _mc_powu(x, N: tl.constexpr):
    r = tl.zeros_like(x) + 1.0
    b = x
    for j in tl.static_range(11):
        if (N // (1 << j)) % 2 == 1:
            r = r * b
        if N >= (2 << j):
            b = b * b
    return r
'''),
    "_mc_powk": (("_mc_powu",), '''
@triton.jit
def _mc_powk(x, K: tl.constexpr):
    if (K == K // 1) and (K >= 1) and (K <= 2047):
        r = _mc_powu(x, K)
    elif (K == K // 1) and (K <= -1) and (K >= -2047):
        r = 1.0 / _mc_powu(x, -K)
    elif K == 0:
        r = tl.zeros_like(x) + 1.0
    else:
        r = tl.exp(K * tl.log(x))
    return r
'''),
    # powr(a, e) from P = powr(a, e + 1) (modelc.functions.powr_shift); at a = 0 powr(0, e):
    # 0, 1 or inf by the sign of e, NaN for a NaN e
    "_mc_powr_shift": ((), '''
@triton.jit
def _mc_powr_shift(P, a, e):
    zero = tl.zeros_like(a)
    z = tl.where(e > 0.0, zero, tl.where(e == 0.0, zero + 1.0, tl.where(e < 0.0, zero + float("inf"),
                                                                         zero + float("nan"))))
    nz = a != 0.0
    return tl.where(nz, P / tl.where(nz, a, 1.0), z)
'''),
    "_mc_expm1": ((), '''
@triton.jit
def _mc_expm1(x):
    u = tl.exp(x)
    um1 = u - 1.0
    d = tl.where((um1 == 0.0) | (um1 == -1.0), 1.0, tl.log(tl.where(um1 == -1.0, 1.0, u)))
    r = tl.where(um1 == 0.0, x, um1 * (x / d))
    r = tl.where(um1 == -1.0, -1.0, r)
    return tl.where(um1 * 0.0 != 0.0, u, r)
'''),
    "_mc_log1p": ((), '''
@triton.jit
def _mc_log1p(x):
    u = 1.0 + x
    d = u - 1.0
    r = tl.log(u) * (x / tl.where(d == 0.0, 1.0, d))
    r = tl.where(d == 0.0, x, r)
    return tl.where(d * 0.0 != 0.0, tl.log(u), r)
'''),
    "_mc_sinh": (("_mc_expm1",), '''
@triton.jit
def _mc_sinh(x):
    v = _mc_expm1(tl.abs(x))
    r = 0.5 * (v + v / (v + 1.0))
    r = tl.where(v * 0.0 != 0.0, v, r)
    return tl.where(x < 0.0, -r, r)
'''),
    "_mc_cosh": ((), '''
@triton.jit
def _mc_cosh(x):
    e = tl.exp(tl.abs(x))
    return 0.5 * (e + 1.0 / e)
'''),
    "_mc_tanh": (("_mc_expm1",), '''
@triton.jit
def _mc_tanh(x):
    a = tl.abs(x)
    a = tl.where(a > 20.0, 20.0, a)
    v = _mc_expm1(2.0 * a)
    r = tl.where(a >= 20.0, 1.0, v / (v + 2.0))
    return tl.where(x < 0.0, -r, r)
'''),
    "_mc_asinh": (("_mc_log1p",), '''
@triton.jit
def _mc_asinh(x):
    a = tl.abs(x)
    s = tl.where(a > 1.0e8, 1.0e8, a)
    r = _mc_log1p(s + s * s / (1.0 + tl.sqrt(1.0 + s * s)))
    r = tl.where(a > 1.0e8, tl.log(a) + tl.full([], 0.6931471805599453, x.dtype), r)
    return tl.where(x < 0.0, -r, r)
'''),
    "_mc_acosh": (("_mc_log1p",), '''
@triton.jit
def _mc_acosh(x):
    t = tl.where(x > 1.0e8, 1.0e8, x) - 1.0
    r = _mc_log1p(t + tl.sqrt(2.0 * t + t * t))
    return tl.where(x > 1.0e8, tl.log(x) + tl.full([], 0.6931471805599453, x.dtype), r)
'''),
    "_mc_atanh": (("_mc_log1p",), '''
@triton.jit
def _mc_atanh(x):
    a = tl.abs(x)
    r = 0.5 * _mc_log1p(2.0 * a / (1.0 - a))
    return tl.where(x < 0.0, -r, r)
'''),
    "_mc_atan": ((), '''
@triton.jit
def _mc_atan(x):
    a = tl.abs(x)
    big = a > 2.414213562373095
    mid = a > 0.66
    t = tl.where(big, -1.0 / tl.where(big, a, 1.0), tl.where(mid, (a - 1.0) / (a + 1.0), a))
    y0 = tl.where(big, tl.full([], 1.5707963267948966, x.dtype),
                  tl.where(mid, tl.full([], 0.7853981633974483, x.dtype), 0.0))
    lo = tl.where(big, tl.full([], 6.123233995736766e-17, x.dtype),
                  tl.where(mid, tl.full([], 3.061616997868383e-17, x.dtype), 0.0))
    z = t * t
    p = tl.full([], -8.750608600031904122785e-1, x.dtype) * z + tl.full([], -1.615753718733365076637e1, x.dtype)
    p = p * z + tl.full([], -7.500855792314704667340e1, x.dtype)
    p = p * z + tl.full([], -1.228866684490136173410e2, x.dtype)
    p = p * z + tl.full([], -6.485021904942025371773e1, x.dtype)
    q = z + tl.full([], 2.485846490142306297962e1, x.dtype)
    q = q * z + tl.full([], 1.650270098316988542046e2, x.dtype)
    q = q * z + tl.full([], 4.328810604912902668951e2, x.dtype)
    q = q * z + tl.full([], 4.853903996359136964868e2, x.dtype)
    q = q * z + tl.full([], 1.945506571482613964425e2, x.dtype)
    r = y0 + ((t * (z * p / q) + t) + lo)
    return tl.where(x < 0.0, -r, r)
'''),
    "_mc_atan2": (("_mc_atan",), '''
@triton.jit
def _mc_atan2(y, x):
    ax = tl.abs(x)
    ay = tl.abs(y)
    big = ay > ax
    r = _mc_atan(tl.where(big, ax, ay) / tl.where(big, ay, tl.where(ax == 0.0, 1.0, ax)))
    r = tl.where(big, tl.full([], 1.5707963267948966, y.dtype) - r, r)
    r = tl.where(x < 0.0, tl.full([], 3.141592653589793, y.dtype) - r, r)
    return tl.where(y < 0.0, -r, r)
'''),
}

def bitrev(i: int, bits: int) -> int:
    """``i`` with its ``bits`` low bits in reverse order (the leaf order of a ``tl.join`` tree)."""
    return int(format(i, f"0{bits}b")[::-1], 2) if bits else 0


def _row_helper(width: int) -> tuple[tuple[str, ...], str]:
    """``_mc_row<width>(a0, ..., a<width-1>, BLOCK)``: the ``[BLOCK, width]`` tile whose column ``j``
    is ``aj`` (a ``[BLOCK]`` value, or a scalar: a shared parameter's, broadcast), by a tree of ``tl.join`` (each join adds a trailing axis of 2; the leaves in bit-reversed
    order make the row-major reshape put ``aj`` in column ``j``). The kernels store rows of values
    through it: one call where the tree took ``width - 1`` lines; Triton inlines it, so the compiled
    kernel is the same."""
    bits = width.bit_length() - 1
    args = [f"a{j}" for j in range(width)]
    level = [args[bitrev(m, bits)] for m in range(width)]
    body, k = [], 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), 2):
            body.append(f"    t{k} = tl.join({level[i]}, {level[i + 1]})")
            nxt.append(f"t{k}")
            k += 1
        level = nxt
    return (), (f"\n@triton.jit\ndef _mc_row{width}({', '.join(args)}, BLOCK: tl.constexpr):\n"
                + "\n".join(body) + f"\n    return tl.reshape({level[0]}, [BLOCK, {width}])\n")


# a load or store through a loop of one trip whose pointer the loop carries (``zero``: a kernel
# argument the runtime passes as 0): Triton's coalescing pass then skips the data-flow slice of the
# access (modelc.backends.triton_backend._Rows, ``detach``); inlined, the same code as spelled out
HELPERS["_mc_load"] = ((), '''
@triton.jit
def _mc_load(ptr, mask, zero):
    x = tl.zeros(ptr.shape, ptr.dtype.element_ty)
    p = ptr
    for _ in range(0, zero + 1):
        x = tl.load(p, mask=mask, other=0.0)
        p += zero
    return x
''')
HELPERS["_mc_store"] = ((), '''
@triton.jit
def _mc_store(ptr, value, mask, zero):
    p = ptr
    for _ in range(0, zero + 1):
        tl.store(p, value, mask=mask)
        p += zero
''')

#: the row helpers' widths: the powers of two a stored row is padded to (triton_backend._width)
ROW_WIDTHS = (2, 4, 8, 16, 32, 64)
for _w in ROW_WIDTHS:
    HELPERS[f"_mc_row{_w}"] = _row_helper(_w)


def _cols_helper(width: int, rows: bool) -> tuple[tuple[str, ...], str]:
    """``_mc_cols<width>(t, BLOCK)`` (``rows``: a ``[BLOCK, width]`` tile) or ``_mc_pcols<width>(t)``
    (a ``[width]`` row, the shared parameters): the tile's columns in order, split by a tree of
    ``tl.split`` over a ``[..., 2, ..., 2]`` reshape (leaf ``m`` of the tree is column ``bitrev(m)``).
    The kernels read each loaded row through it, one call where the tree took ``width`` lines;
    Triton inlines it, so the compiled kernel is the same."""
    bits = width.bit_length() - 1
    shape = ", ".join(["BLOCK"] * rows + ["2"] * bits)
    body, level, k = [f"    t = tl.reshape(t, [{shape}])"], ["t"], 0
    for _ in range(bits):
        nxt = []
        for t in level:
            body.append(f"    s{k}, s{k + 1} = tl.split({t})")
            nxt += [f"s{k}", f"s{k + 1}"]
            k += 2
        level = nxt
    cols = [level[bitrev(c, bits)] for c in range(width)]
    name, sig = (f"_mc_cols{width}", "t, BLOCK: tl.constexpr") if rows else (f"_mc_pcols{width}", "t")
    return (), (f"\n@triton.jit\ndef {name}({sig}):\n" + "\n".join(body)
                + f"\n    return {', '.join(cols)}\n")


for _w in ROW_WIDTHS:
    HELPERS[f"_mc_cols{_w}"] = _cols_helper(_w, True)
    HELPERS[f"_mc_pcols{_w}"] = _cols_helper(_w, False)

_CALL = re.compile(r"\b(_mc_[a-z0-9_]+)\(")


def helpers_for(lines) -> list[str]:
    """The helper names (with what they call, callees first) that ``lines`` of kernel code call."""
    wanted: list[str] = []

    def add(name: str) -> None:
        if name in wanted:
            return
        for dep in HELPERS[name][0]:
            add(dep)
        wanted.append(name)

    for line in lines:
        for name in _CALL.findall(line):
            if name in HELPERS:
                add(name)
    return wanted


def helper_source(names) -> str:
    """The sources of ``names`` (and what they call), callees first, for a kernel file."""
    return "".join(HELPERS[n][1] for n in helpers_for(f"{n}(" for n in names))
