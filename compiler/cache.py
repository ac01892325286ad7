"""The compile cache: generated modules keyed on everything that changes them.

Key = sha256 over (the spec's normalised digest, the model name, the codegen options, and the versions
of modelc, sympy, torch and triton). The generated module is generic over dtype (the Triton kernel
takes ``DTYPE`` as a constexpr and Triton caches one binary per dtype itself; the PyTorch code follows
its inputs), so dtype is part of the key only when a caller asks for it. The artifact is one ``.py``
file (kernels must live in real files to compile for a GPU), written atomically: concurrent compiles
of the same key write identical bytes and ``os.replace`` them, so a reader never sees a partial file.

Cache folder: the ``cache_dir`` argument, else ``$MODELC_CACHE_DIR``, else ``~/.cache/modelc``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

from modelc.errors import ModelcError

_LOADED: dict[str, ModuleType] = {}


def cache_folder(explicit: str | os.PathLike | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("MODELC_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "modelc"


def tool_versions() -> dict[str, str]:
    import sympy
    import torch

    from modelc import __version__

    try:
        import triton
        tv = triton.__version__
    except ImportError:  # pragma: no cover
        tv = "none"
    return {"modelc": __version__, "sympy": sympy.__version__, "torch": torch.__version__, "triton": tv}


def cache_key(spec_digest: str, model: str, options=None, dtype: str | None = None) -> str:
    opts = dataclasses.asdict(options) if dataclasses.is_dataclass(options) else (options or {})
    payload = {"spec": spec_digest, "model": model, "options": opts, "dtype": dtype,
               "versions": tool_versions()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def pick_model(spec, model: str | None) -> str:
    """The model to compile: ``model`` if given, else the spec's only composition, else its only
    model; otherwise an error listing the choices."""
    names = [c.name for c in spec.compositions] + [m.name for m in spec.models]
    if model is not None:
        if model not in names:
            raise ModelcError(f"{spec.path}: no model or composition named {model!r}; "
                              f"available: {', '.join(names)}")
        return model
    if len(spec.compositions) == 1:
        return spec.compositions[0].name
    if not spec.compositions and len(spec.models) == 1:
        return spec.models[0].name
    raise ModelcError(f"{spec.path} holds several models; pick one with model=...: {', '.join(names)}")


def import_file(path: Path, name: str) -> ModuleType:
    """Import a generated module from its file (registered in ``sys.modules`` under ``name``)."""
    if name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ModelcError(f"cannot import generated module {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def load(path: str | os.PathLike, model: str | None = None, *, cache_dir: str | os.PathLike | None = None,
         dtype: str | None = None, **options) -> ModuleType:
    """Compile ``model`` of the spec at ``path`` (once; later calls reuse the cached file) and
    import the generated module. ``options`` are fields of :class:`modelc.driver.Options`."""
    from modelc.backends.module import write_atomic
    from modelc.driver import Options, compile_model, load_spec

    fields = {f.name for f in dataclasses.fields(Options)}
    bad = sorted(set(options) - fields)
    if bad:
        raise ModelcError(f"unknown compile option(s) {', '.join(bad)}; known: {', '.join(sorted(fields))}")
    opts = Options(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in options.items()})
    spec = load_spec(path)
    name = pick_model(spec, model)
    key = cache_key(spec.digest, name, opts, dtype)
    if key in _LOADED:
        return _LOADED[key]
    from modelc.backends.names import sanitize

    file = cache_folder(cache_dir) / f"{sanitize(name)}-{key[:24]}.py"
    if not file.exists():
        write_atomic(file, compile_model(spec, name, opts).source)
    mod = import_file(file, f"modelc_cache_{sanitize(name)}_{key[:24]}")
    _LOADED[key] = mod
    return mod
