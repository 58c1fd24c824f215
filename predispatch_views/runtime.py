"""Stage 4: the runtime. Call the compiled core, then replay the epilogue in eager under autograd.

The epilogue runs on every call, so it is generated as straight-line Python (no FX interpreter, no
nn.Module.__call__): one local per node, ops bound as globals to their C++ callables, constant arguments
bound once. See Note [Replaying pre-dispatch views] in analysis.py for why the replay is eager's graph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from .slicing import SlicedProgram


class EpilogueCodegen:
    """Turns the epilogue graph into the source of ``run(*args)``."""

    def __init__(self) -> None:
        self.globals: dict[str, Any] = {}
        self._ids: dict[int, str] = {}

    def bind(self, value: Any, hint: str) -> str:
        key = id(value)
        if key not in self._ids:
            name = f"_{hint}{len(self._ids)}"
            self._ids[key] = name
            self.globals[name] = value
        return self._ids[key]

    def fmt(self, arg: Any, names: dict[fx.Node, str]) -> str:
        if isinstance(arg, fx.Node):
            return names[arg]
        if isinstance(arg, list):
            return "[" + ", ".join(self.fmt(a, names) for a in arg) + "]"
        if isinstance(arg, tuple):
            return "(" + "".join(self.fmt(a, names) + ", " for a in arg) + ")"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{k!r}: {self.fmt(v, names)}" for k, v in arg.items()) + "}"
        if arg is None or isinstance(arg, (bool, int, str)):
            return repr(arg)
        return self.bind(arg, "k")

    def generate(self, sliced: SlicedProgram, call_core: bool) -> str:
        lines = ["def run(*args):"]
        if call_core:
            lines.append("    core = _core(*args)")
        names: dict[fx.Node, str] = {}
        placeholders = list(sliced.epilogue.graph.find_nodes(op="placeholder"))
        for p, source in zip(placeholders, sliced.sources):
            names[p] = f"v{len(names)}"
            container = "args" if source.kind == "arg" else "core"
            lines.append(f"    {names[p]} = {container}[{source.index}]")
        for n in sliced.epilogue.graph.nodes:
            if n.op == "placeholder":
                continue
            if n.op == "output":
                lines.append(f"    return {self.fmt(_as_tuple(n.args[0]), names)}")
                break
            names[n] = f"v{len(names)}"
            if n.target is operator.getitem:
                expr = f"{self.fmt(n.args[0], names)}[{self.fmt(n.args[1], names)}]"
            else:
                fn = self.bind(_fast_callable(n.target), "op")
                parts = [self.fmt(a, names) for a in n.args]
                parts += [f"{k}={self.fmt(v, names)}" for k, v in n.kwargs.items()]
                expr = f"{fn}({', '.join(parts)})"
            lines.append(f"    {names[n]} = {expr}")
        return "\n".join(lines) + "\n"


def _as_tuple(outputs: Any) -> tuple[Any, ...]:
    return tuple(outputs) if isinstance(outputs, (list, tuple)) else (outputs,)


def _fast_callable(target: Any) -> Callable[..., Any]:
    # OpOverload.__call__ is a Python frame around the C++ op; call the C++ op directly.
    if isinstance(target, torch._ops.OpOverload):
        return target._op
    return target


def build_runtime(sliced: SlicedProgram, compiled_core: Callable[..., Any] | None) -> Callable[..., Any]:
    """``run(*args)``: the compiled program. ``compiled_core`` is None when the core does nothing."""
    codegen = EpilogueCodegen()
    source = codegen.generate(sliced, call_core=compiled_core is not None)
    scope: dict[str, Any] = dict(codegen.globals)
    scope["_core"] = compiled_core
    exec(compile(source, "<predispatch_views epilogue>", "exec"), scope)
    run = scope["run"]
    run.source = source  # for explain() and debugging
    return run
