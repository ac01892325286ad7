"""The compiler's passes, one per module, each a pure function over immutable IR:

``compose`` (ComposeDecl + models -> composed Model; implicit models resolved into their residual
systems) -> ``differentiate`` (partials; chain rule; implicit-function-theorem bookkeeping) ->
``lower`` (Model -> Program: Assign / Newton / LinearSolve) -> ``cse`` (shared subexpressions per
straight-line segment; ``count_ops``). ``symbols`` names the symbols the passes introduce.
"""
