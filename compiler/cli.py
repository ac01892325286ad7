"""The ``modelc`` command line: ``check``, ``graph``, ``compile``, ``run``.

Each sub-command lives in :mod:`modelc.commands` (one module each) and exposes ``add_arguments``
and ``main(args) -> int``. User errors (:class:`modelc.errors.ModelcError`) are printed without a
traceback and give exit status 2; an :class:`modelc.errors.InternalError` (a bug in modelc) exit
status 3, also without a traceback; a closed output pipe (``modelc check ... | head``) exit status 1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from modelc import __version__
from modelc.errors import InternalError, ModelcError

COMMANDS = {
    "check": "validate specs and print each model's variables, layout and operation counts",
    "graph": "draw the dependency graph of a composed model (DOT, Mermaid, SVG/PNG)",
    "compile": "generate Python modules (PyTorch code, Triton kernels and C source) from specs",
    "run": "drive a model through a strain-, stress- or mixed-controlled history",
    "export": "write a C interface (header, source, layout, ABI page) or an Abaqus-style UMAT",
    "demo": "compile a bundled model, run it through a bundled history and show the results",
    "info": "show what this machine gives each backend: the C compiler, its flags, threads, streaming stores",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="modelc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"modelc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_ in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        module = importlib.import_module(f"modelc.commands.{name}")
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 1
    formatwarning, warnings.formatwarning = warnings.formatwarning, _one_line  # one line each
    try:
        return int(args._main(args) or 0)
    except ModelcError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    except InternalError as exc:  # a bug in modelc: the message says so and asks for the spec
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except BrokenPipeError:  # `modelc check spec.yaml | head`: the reader left, nothing to report
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except KeyboardInterrupt:
        print("modelc: interrupted", file=sys.stderr)
        return 130
    except RecursionError:  # a last resort: the front end's limits should catch deep specs first
        print("error: the input is nested too deeply for modelc (Python's recursion limit); "
              "see docs/limits.md", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = formatwarning


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
