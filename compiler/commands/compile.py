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

from modelc.errors import ModelcError, SpecError
from modelc.frontend.limits import read_spec_file
from modelc.frontend.yamlio import YList, YMap, YScalar, load_yaml_text

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
                try:  # the front end's reader: regular files only, bounded, safe YAML
                    root = load_yaml_text(read_spec_file(str(f), None), str(f))
                except SpecError:
                    continue  # the front end reports it when the file is compiled
                inc = root.get("include") if isinstance(root, YMap) else None
                for i in inc.items if isinstance(inc, YList) else ():
                    if isinstance(i, YScalar) and isinstance(i.value, str):
                        included.add(os.path.normpath(f.parent / i.value))
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
    files = spec_files(paths)
    known = set()
    specs = []
    for f in files:
        specs.append((f, load_spec(f)))
        known |= {p.name for _, s in specs[-1:] for m in s.models for p in m.parameters}
    unknown = [b for b in bake if b not in known]
    if unknown:
        from modelc.frontend.expr import did_you_mean

        hint = did_you_mean(unknown[0], known)
        raise ModelcError(f"--bake: no model in {', '.join(map(str, files))} has a parameter named "
                          f"{', '.join(map(repr, unknown))}" + (f"; {hint}" if hint else "")
                          + f" (parameters: {', '.join(sorted(known)) or 'none'})")
    for f, spec in specs:
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

    from modelc.runtime.outputs import check_output_folder

    bake = tuple(b.strip() for b in args.bake.split(",") if b.strip())
    out = Path(args.out) if args.check else check_output_folder(args.out, "--out")  # before the work
    modules = generate(args.specs, args.select, bake)
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
    for name, text in sorted(modules.items()):
        check_imports(name, text)
    try:
        written = write_modules(modules, out)
    except OSError as exc:
        raise ModelcError(f"--out {out}: cannot write the generated modules ({exc.strerror or exc}"
                          f"{': ' + exc.filename if getattr(exc, 'filename', None) else ''})") from None
    for p in written:
        print(f"wrote {p}")
    return 0


def check_imports(name: str, text: str) -> None:
    """Import a generated module from a temporary file: ``compile`` never reports success for a
    module that does not import."""
    import tempfile

    from modelc.cache import import_file
    from modelc.errors import InternalError

    mod_name = f"_modelc_compile_check_{Path(name).stem}"
    with tempfile.TemporaryDirectory(prefix="modelc-check-") as tmp:
        p = Path(tmp) / name
        p.write_text(text, encoding="utf-8")
        try:
            import_file(p, mod_name)
        except Exception as exc:
            raise InternalError(f"the generated module {name} does not import: {type(exc).__name__}: {exc}") \
                from None
        finally:
            sys.modules.pop(mod_name, None)
