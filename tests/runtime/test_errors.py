"""The base errors (runtime/errors.py): the two families kept apart (a user error, ``ModelcError``
and its ``InputError``, versus a modelc bug, ``InternalError``), the messages they carry, and that
importing them loads nothing else (generated code imports them, so they must stay stand-alone)."""
from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from modelc.runtime.errors import InputError, InternalError, ModelcError

ROOT = Path(__file__).resolve().parents[2]


def test_the_two_families_are_disjoint():
    assert issubclass(InputError, ModelcError) and issubclass(ModelcError, Exception)
    assert not issubclass(InternalError, ModelcError)  # a bug is never reported as the user's fault
    assert not issubclass(ModelcError, InternalError)
    # an `except ModelcError` (the CLI's user-error handler) lets a bug through
    with pytest.raises(InternalError):
        try:
            raise InternalError("x")
        except ModelcError:  # pragma: no cover - must not catch it
            pytest.fail("InternalError caught as a user error")


def test_user_errors_carry_the_message_verbatim():
    msg = "forces/t: dtype torch.float32 does not match torch.float64"
    for cls in (ModelcError, InputError):
        e = cls(msg)
        assert str(e) == msg and e.args == (msg,)
    with pytest.raises(ModelcError, match="^forces/t: dtype"):  # catchable as the base class
        raise InputError(msg)


def test_internal_error_says_it_is_a_bug():
    e = InternalError("pass lower: an unresolved implicit model")
    assert str(e) == ("internal error (this is a bug in modelc, please report it): "
                      "pass lower: an unresolved implicit model")
    assert e.args == (str(e),)
    with pytest.raises(TypeError):
        InternalError()  # type: ignore[call-arg]  # a bug report always says what went wrong


def test_user_errors_pickle_round_trip():
    """Errors cross process boundaries (process pools, distributed ranks) by pickling."""
    for e in (ModelcError("a"), InputError("b: bad")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)


def test_internal_error_keeps_its_message_through_pickle_and_copy():
    e = InternalError("x")
    assert str(pickle.loads(pickle.dumps(e))) == str(e)
    assert str(copy.copy(e)) == str(e)


def test_importing_the_errors_loads_no_other_module_of_modelc_nor_sympy():
    code = ("import json, sys; import modelc.runtime.errors; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('modelc', 'sympy', 'torch')))))")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout.strip().splitlines()[-1])
    # the package itself and its lazily-loading runtime package (which imports the type table only)
    assert set(loaded) <= {"modelc", "modelc.runtime", "modelc.runtime.errors", "modelc.runtime.types"}, loaded
