"""Errors. Two families, kept apart on purpose (as in pystencils): the user's input is wrong
(:class:`ModelcError` and its subclasses, printed without a traceback by the CLI), or modelc has a bug
(:class:`InternalError`, which says so). The base classes live in :mod:`modelc.runtime.errors` (the
runtime raises them without importing the compiler); the compiler's own errors subclass them."""
from __future__ import annotations

from typing import TYPE_CHECKING

from modelc.runtime.errors import InputError, InternalError, ModelcError

if TYPE_CHECKING:
    from modelc.ir import Loc

__all__ = ["ModelcError", "SpecError", "CompositionError", "InputError", "InternalError"]


_WIDTH = 100  # the longest source line an error shows whole


class SpecError(ModelcError):
    """An error in a spec file, pointing at file:line:col with the offending text and a caret.

    ``loc`` locates the start of ``text`` (the whole offending expression or YAML value);
    ``span`` optionally narrows the caret to ``text[span[0]:span[1]]``.
    """

    def __init__(self, message: str, loc: Loc | None = None, *, span: tuple[int, int] | None = None,
                 hint: str = ""):
        self.message = message
        self.loc = loc
        self.span = span
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        if self.loc is None:
            out = f"error: {self.message}"
        else:
            out = f"{self.loc}: error: {self.message}"
            if self.loc.text:
                text = self.loc.text
                start, end = self.span if self.span is not None else (0, len(text))
                end = max(end, start + 1)
                if len(text) > _WIDTH:  # a window around the caret, so that a huge line stays readable
                    a = max(0, min(start - 20, len(text) - _WIDTH))
                    b = min(len(text), a + _WIDTH)
                    text = ("..." if a else "") + text[a:b] + ("..." if b < len(text) else "")
                    shift = 3 if a else 0
                    start, end = start - a + shift, min(end, b) - a + shift
                    end = max(end, start + 1)
                out += f"\n    {text}\n    {' ' * start}{'^' * (end - start)}"
        if self.hint:
            out += f"\n  hint: {self.hint}"
        return out


class CompositionError(ModelcError):
    """Models cannot be wired together: a cycle, two providers, a missing input, a type mismatch."""
