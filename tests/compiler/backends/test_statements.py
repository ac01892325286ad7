"""The backends' shared statement emitter (modelc.backends.statements)."""
from __future__ import annotations

from pathlib import Path

from modelc import driver, ir
from modelc.backends.names import Namer
from modelc.backends.torch_backend import TorchEmitter
from modelc.backends.torch_printer import TorchPrinter

SPEC = Path(__file__).parents[3] / "spec" / "library.yaml"


def test_guarded_runs_an_after_callable_right_after_its_statement():
    """Inside a guarded group, the group is closed after the statement, the callable's lines come
    next, and the rest of the group is guarded again."""
    program = driver.compile_model(driver.load_spec(SPEC), "j2_linear_iso").program
    full = sum(v.bit for v in ir.variants_of(program))
    masks = program.masks
    k = next(i for i in range(len(masks) - 2) if masks[i] != full and masks[i + 1] == masks[i] == masks[i + 2])
    namer = Namer(short=True)
    em = TorchEmitter(TorchPrinter(namer), namer)
    em.guarded(program, {k: lambda: em.line("# MARK")})
    mark = next(i for i, line in enumerate(em.lines) if line.strip() == "# MARK")
    target = namer(program.body[k].target)
    assert em.lines[mark - 1].strip().startswith(f"{target} = ")
    assert em.lines[mark + 1].strip().startswith(f"if V & {masks[k]}:")
    assert em.lines[mark + 2].strip().startswith(f"{namer(program.body[k + 1].target)} = ")
    # without it, the group is one block
    em2 = TorchEmitter(TorchPrinter(namer), namer)
    em2.guarded(program)
    assert sum(line.strip().startswith("if V &") for line in em2.lines) + 1 == sum(
        line.strip().startswith("if V &") for line in em.lines)
