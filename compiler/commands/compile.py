"""`modelc compile SPEC_OR_DIR... --out DIR [--check]`: write one generated module per model.

For a folder, the specs compiled are its *root* ``.yaml`` files: those no other spec in the folder
includes (building blocks are compiled through the specs that include them). Which models of a spec
get a module is ``--select``: ``auto`` (default: the spec's compositions if it declares any, else its
leaf models), ``compositions``, ``leaves`` or ``all``. Files are named after the models
(``j2_perfect.py``); two specs producing the same model name is an error.

``--check`` writes nothing: it compares DIR with what would be generated and exits 1 listing stale,
missing and extra modules (``__init__.py`` is never extra).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from modelc.errors import ModelcError

SELECT = ("auto", "compositions", "leaves", "all")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("specs", nargs="+", metavar="SPEC_OR_DIR", help="spec files or folders of specs")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the generated modules")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if DIR differs from what would be generated")
    p.add_argument("--select", choices=SELECT, default="auto", help="which models of each spec to compile")
    p.add_argument("--bake", default="", metavar="P1,P2",
                   help="parameters to bake into the kernels as compile-time constants")


def spec_files(paths) -> list[Path]:
    """The spec files to compile, in a deterministic order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files = sorted(p.glob("*.yaml")) + sorted(p.glob("*.yml"))
            included: set[str] = set()
            for f in files:
                try:
                    data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
                except yaml.YAMLError:
                    continue  # the front end reports it when the file is compiled
                inc = data.get("include", []) if isinstance(data, dict) else []
                for i in inc if isinstance(inc, list) else []:
                    included.add(os.path.normpath(f.parent / str(i)))
            out += [f for f in files if os.path.normpath(f) not in included]
        elif p.exists():
            out.append(p)
        else:
            raise ModelcError(f"no such spec file or folder: {p}")
    return out


def selected(spec, select: str) -> list[str]:
    comps = [c.name for c in spec.compositions]
    leaves = [m.name for m in spec.models]
    if select == "compositions":
        return comps
    if select == "leaves":
        return leaves
    if select == "all":
        return comps + leaves
    return comps or leaves


def generate(paths, select: str = "auto", bake: tuple[str, ...] = ()) -> dict[str, str]:
    """``{file name: source}`` for every selected model of every spec."""
    from modelc.backends.module import module_file_name
    from modelc.driver import compile_model, load_spec
    from modelc.options import CompileOptions

    modules: dict[str, str] = {}
    origin: dict[str, Path] = {}
    for f in spec_files(paths):
        spec = load_spec(f)
        for name in selected(spec, select):
            fname = module_file_name(name)
            if fname in modules:
                raise ModelcError(f"model {name} is produced by both {origin[fname]} and {f}; "
                                  "compile them into different folders")
            params = {p.name for m in spec.models for p in m.parameters}
            opts = CompileOptions(constant_params=tuple(b for b in bake if b in params))
            modules[fname] = compile_model(spec, name, opts).source
            origin[fname] = f
    return modules


def check(modules: dict[str, str], out: Path) -> list[str]:
    """Problems of ``out`` against ``modules`` (empty: up to date)."""
    problems = []
    for name in sorted(modules):
        p = out / name
        if not p.exists():
            problems.append(f"missing: {p}")
        elif p.read_text(encoding="utf-8") != modules[name]:
            problems.append(f"stale:   {p}")
    if out.is_dir():
        for p in sorted(out.glob("*.py")):
            if p.name != "__init__.py" and p.name not in modules:
                problems.append(f"extra:   {p}")
    return problems


def main(args: argparse.Namespace) -> int:
    from modelc.backends.module import write_modules

    bake = tuple(b for b in args.bake.split(",") if b)
    modules = generate(args.specs, args.select, bake)
    out = Path(args.out)
    if args.check:
        problems = check(modules, out)
        if problems:
            print(f"modelc compile --check: {out} is not current ({len(problems)} problem(s)):", file=sys.stderr)
            for line in problems:
                print("  " + line, file=sys.stderr)
            print(f"  regenerate with: modelc compile {' '.join(args.specs)} --out {out}", file=sys.stderr)
            return 1
        print(f"{out}: {len(modules)} module(s) up to date")
        return 0
    for p in write_modules(modules, out):
        print(f"wrote {p}")
    return 0
