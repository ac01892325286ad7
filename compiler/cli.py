"""The ``modelc`` command line: ``check``, ``graph``, ``compile``, ``run``.

Each sub-command lives in :mod:`modelc.commands` (one module each) and exposes ``add_arguments``
and ``main(args) -> int``. User errors (:class:`modelc.errors.ModelcError`) are printed without a
traceback and give exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from modelc import __version__
from modelc.errors import ModelcError

COMMANDS = {
    "check": "validate specs and print each model's variables, layout and operation counts",
    "graph": "draw the dependency graph of a composed model (DOT, Mermaid, SVG/PNG)",
    "compile": "generate Python/Triton modules from specs",
    "run": "drive a model through a strain-, stress- or mixed-controlled history",
    "export": "write a C interface (header, source, layout, ABI page) or an Abaqus-style UMAT",
    "demo": "compile a bundled model, run it through a bundled history and show the results",
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
    try:
        return int(args._main(args) or 0)
    except ModelcError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
