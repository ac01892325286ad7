"""`modelc export c|umat SPEC --model NAME --out DIR`: files a host code uses without Python.

``c``: ``NAME.h``, ``NAME.c``, ``NAME.json`` (layout) and ``NAME.md`` (the ABI). ``umat``:
``NAME_umat.c`` (an Abaqus-style UMAT, self-contained) and ``NAME_umat.json`` (PROPS and STATEV).
SPEC is a spec file or the name of a bundled model.
"""
from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=("c", "umat"), help="c: a C interface; umat: an Abaqus-style UMAT")
    p.add_argument("spec", metavar="SPEC", help="the spec file (YAML), or the name of a bundled model")
    p.add_argument("--model", metavar="NAME", help="which model of the spec (when it holds several)")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write into")


def main(args: argparse.Namespace) -> int:
    from modelc.errors import InputError
    from modelc.export import prepare
    from modelc.export.c_interface import export_c
    from modelc.export.umat import export_umat

    from modelc.runtime.outputs import check_output_folder

    out = check_output_folder(args.out, "--out")  # before the work, like run and demo
    spec, model = args.spec, args.model
    from modelc.bundled import is_model_name, resolve

    if not Path(spec).is_file() and not is_model_name(spec):
        raise InputError(f"{spec}: spec file not found")
    spec, model = resolve(spec, model)  # a bundled name: its file and its own model
    spec = str(spec)
    m = prepare(spec, model)
    paths = (export_c if args.kind == "c" else export_umat)(m, out)
    print(f"{m.name}: wrote " + ", ".join(str(p) for p in paths))
    return 0
