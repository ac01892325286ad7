"""The base errors, shared by the runtime and the compiler (the compiler's errors subclass them).

Two families, kept apart on purpose (as in pystencils): the user's input is wrong
(:class:`ModelcError` and its subclasses, printed without a traceback by the CLI), or modelc has a
bug (:class:`InternalError`, which says so). They live in the runtime so that what generated code
imports never loads the compiler; ``modelc.errors`` re-exports them.
"""
from __future__ import annotations


class ModelcError(Exception):
    """Something the user can fix. ``str()`` is the complete, user-facing message."""


class InputError(ModelcError):
    """Bad input at a call boundary of the runtime or of a generated model (shape, dtype, name...)."""


class InternalError(Exception):
    """A bug in modelc: please report it with the spec that triggered it."""

    def __init__(self, message: str):
        self.message = message
        super().__init__(f"internal error (this is a bug in modelc, please report it): {message}")

    def __reduce__(self):  # pickled or copied (a worker process's error): the message, prefixed once
        return type(self), (self.message,)
