"""Stage 4: the runtime. Call the compiled core, then replay the epilogue in eager under autograd.

The epilogue runs on every call, so it is generated as straight-line Python (no FX interpreter, no
nn.Module.__call__): one local per node, ops bound as globals to their C++ callables, constant arguments
bound once. See Note [Replaying pre-dispatch views] in analysis.py for why the replay is eager's graph.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .graph_meta import alias_roots
from .graph_ops import is_grad_mode_change
from .slicing import SlicedProgram
from .version_watches import watch_lines


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
        if isinstance(arg, slice):  # a tensor index from Dynamo's graph (Note [Slicing Dynamo's graph])
            return f"slice({self.fmt(arg.start, names)}, {self.fmt(arg.stop, names)}, {self.fmt(arg.step, names)})"
        if isinstance(arg, dict):
            return "{" + ", ".join(f"{k!r}: {self.fmt(v, names)}" for k, v in arg.items()) + "}"
        if arg is None or isinstance(arg, (bool, int, str)):
            return repr(arg)
        return self.bind(arg, "k")

    def generate(self, sliced: SlicedProgram, call_core: bool) -> str:
        body = self._body(sliced, call_core)
        if not any(is_grad_mode_change(n) for n in sliced.epilogue.graph.nodes):
            return "def run(*args):\n" + "".join(f"    {line}\n" for line in body)
        # A replayed view or mutation that raises under no_grad must not leave grad mode off for the caller.
        lines = ["def run(*args):", "    grad_enabled = _is_grad_enabled()", "    try:"]
        lines += [f"        {line}" for line in body]
        lines += ["    finally:", "        _set_grad_enabled(grad_enabled)"]
        self.globals.update(_is_grad_enabled=torch.is_grad_enabled, _set_grad_enabled=ti.SET_GRAD_ENABLED)
        return "\n".join(lines) + "\n"

    def _body(self, sliced: SlicedProgram, call_core: bool) -> list[str]:
        lines = []
        # The k-th core output: ``core[k]``, or ``core{j}[i]`` where the core runs as independent parts.
        core_output = {k: f"core[{k}]" for k in range(len(sliced.core.graph.output_node().args[0]))}
        if call_core and (len(sliced.parts) > 1 or sliced.parts[0].graph is not sliced.core):
            for j, part in enumerate(sliced.parts):
                lines.append(f"core{j} = _core{j}(" + "".join(f"args[{i}], " for i in part.inputs) + ")")
                core_output.update({k: f"core{j}[{i}]" for i, k in enumerate(part.outputs)})
        elif call_core:
            lines.append("core = _core(*args)")
        if call_core:  # Note [Eager's version error] in version_watches.py
            lines += watch_lines(sliced, core_output, self.bind)
        names: dict[fx.Node, str] = {}
        placeholders = list(sliced.epilogue.graph.find_nodes(op="placeholder"))
        for p, source in zip(placeholders, sliced.sources):
            names[p] = f"v{len(names)}"
            value = f"args[{source.index}]" if source.kind == "arg" else core_output[source.index]
            lines.append(f"{names[p]} = {value}")
        output = sliced.epilogue.graph.output_node()
        outputs = graph_ops.as_tuple(output.args[0])
        runs = _output_runs(outputs, output)
        sliced_out = {n for start, length in runs.items() for n in outputs[start : start + length]}
        for n in sliced.epilogue.graph.nodes:
            if n.op in ("placeholder", "output") or n in sliced_out:
                continue
            names[n] = f"v{len(names)}"
            if n.target is operator.getitem:
                expr = f"{self.fmt(n.args[0], names)}[{self.fmt(n.args[1], names)}]"
            else:
                fn = self.bind(_fast_callable(n.target), _readable_name(n.target))
                parts = [self.fmt(a, names) for a in n.args]
                parts += [f"{k}={self.fmt(v, names)}" for k, v in n.kwargs.items()]
                expr = f"{fn}({', '.join(parts)})"
            lines.append(f"{names[n]} = {expr}")
        returned, i = [], 0
        while i < len(outputs):
            if i in runs:  # one slice of the multi-output call's list, no Python work per output
                source, first = outputs[i].args
                returned.append(f"*{names[source]}[{first}:{first + runs[i]}]")
                i += runs[i]
            else:
                returned.append(self.fmt(outputs[i], names))
                i += 1
        lines.append("return (" + "".join(r + ", " for r in returned) + ")")
        return lines


# A run of outputs this long that are consecutive results of one multi-output call is returned as a slice.
# Shorter runs keep one line per output: a slice is no faster there, and explain() shows each output by name.
_SLICE_RUNS_FROM = 8


def _output_runs(outputs: tuple[Any, ...], output: fx.Node) -> dict[int, int]:
    """Start position -> length of each run of outputs ``src[k], src[k + 1], ...`` used by nothing else."""
    count = Counter(id(n) for n in outputs)

    def item(i: int) -> tuple[fx.Node, int] | None:
        n = outputs[i]
        if (
            isinstance(n, fx.Node)
            and n.target is operator.getitem
            and isinstance(n.args[1], int)
            and list(n.users) == [output]
            and count[id(n)] == 1  # returned once: its only name is its place in the slice
        ):
            return n.args[0], n.args[1]
        return None

    runs: dict[int, int] = {}
    i = 0
    while i < len(outputs):
        first = item(i)
        length = 1
        while first is not None and i + length < len(outputs) and item(i + length) == (first[0], first[1] + length):
            length += 1
        if first is not None and length >= _SLICE_RUNS_FROM:
            runs[i] = length
        i += length
    return runs


def _readable_name(target: Any) -> str:
    # aten.unbind.int -> "aten_unbind_int", operator.floordiv -> "floordiv": the source reads like the graph.
    name = str(target) if isinstance(target, ti.OpOverload) else getattr(target, "__name__", "op")
    return "".join(c if c.isalnum() else "_" for c in name) + "_"


def _fast_callable(target: Any) -> Callable[..., Any]:
    # OpOverload.__call__ is a Python frame around the C++ op; call the C++ op directly.
    if isinstance(target, ti.OpOverload):
        return ti.overload_packet(target)
    return target


def build_runtime(sliced: SlicedProgram, compiled_parts: Sequence[Callable[..., Any]] | None) -> Callable[..., Any]:
    """``run(*args)``: the compiled program. ``compiled_parts``: one per ``sliced.parts``; None when the core does
    nothing."""
    codegen = EpilogueCodegen()
    source = codegen.generate(sliced, call_core=compiled_parts is not None)
    scope: dict[str, Any] = dict(codegen.globals)
    scope.update({f"_core{j}": part for j, part in enumerate(compiled_parts or ())})
    if compiled_parts is not None and len(compiled_parts) == 1:
        scope["_core"] = compiled_parts[0]
    exec(compile(source, "<predispatch_views epilogue>", "exec"), scope)
    run = scope["run"]
    run.source = source  # for explain() and debugging
    return run


# Note [A restricted view aliased by a write]
# A view autograd forbids rebasing (a multi-output view such as an ``unbind`` output, a view made under no_grad...)
# raises eager's lazy error ("Output 2 of Split is a view and its base ... has been modified inplace") when its
# ``grad_fn`` is read after an alias of it was written. Eager reads it only where the program uses the view
# after the write. A compiled graph that takes such a view as an input and writes an alias of it raises where
# eager does not: AOTAutograd applies an input's write after its compiled forward (its mutation epilogue,
# ``input.copy_(new)``) in the caller's grad mode, not in the program's no_grad block, and a restricted view so
# written raises its error at once ("... is being modified inplace"); its autograd.Function reads the inputs'
# ``grad_fn`` too. Stock does the same given the same inputs: stock's own outputs are not views, so stock never
# hands them over; the prototype's are, and a graph break hands them to the next graph (fuzzer s21_14). Such a
# call runs the graph uncompiled: eager's ops in eager's order. A call with grad mode off runs compiled:
# AOTAutograd compiled the graph for it without an autograd.Function (Dynamo guards on grad mode), and a write
# under no_grad is no rebase (fuzzer s1822_120, called under no_grad). Only a write compiled code makes counts:
# a write the epilogue replays is eager's own call, made in eager's grad mode where eager makes it, raising what
# eager raises (``inputs_the_core_writes``; fuzzer s1831_188, a no_grad ``copy_`` of a Split output).


def uncompiled_when_a_restricted_view_is_written(
    compiled: Callable[..., Any],
    gm: fx.GraphModule,
    written: list[int],
    example_inputs: Sequence[Any],
    on_use: Callable[[int], None],
) -> Callable[..., Any]:
    """``compiled``, or ``gm`` run eagerly (after ``on_use(k)``) for calls where input ``k`` is a restricted
    view requiring grad that shares storage with a written input; see Note [A restricted view aliased by a
    write]. Only inputs that share storage with a written input in ``example_inputs`` are checked on each call:
    Dynamo's aliasing guards recompile when inputs that did not alias start to."""
    written_storages = {_storage(example_inputs[i]) for i in written}
    candidates = [k for k, t in enumerate(example_inputs) if _storage(t) in written_storages - {None}]
    if not candidates:
        return compiled

    def run(*args: Any) -> Any:  # Dynamo calls a backend's result with positional inputs
        k = restricted_view_aliasing(args, written, candidates) if torch.is_grad_enabled() else None
        if k is None:
            return compiled(*args)
        on_use(k)
        grad_enabled = torch.is_grad_enabled()
        try:
            return gm(*args)
        finally:  # Dynamo's graph toggles grad mode without try/finally; eager's ``with`` blocks restore it
            ti.SET_GRAD_ENABLED(grad_enabled)

    return run


def inputs_the_core_writes(sliced: SlicedProgram, written: list[int]) -> list[int]:
    """Of ``written``, the inputs the compiled core writes, through any alias it takes of them; all of ``written``
    where the core holds a call whose writes its schema does not say."""
    nodes = list(sliced.core.graph.nodes)
    for n in nodes:
        if n.op in ("call_method", "call_module") or (
            n.op == "call_function"
            and not graph_ops.is_aten_call(n)
            and not is_grad_mode_change(n)
            and getattr(n.target, "__module__", None) not in ("_operator", "math")
        ):
            return written
    placeholders = [n for n in nodes if n.op == "placeholder"]
    root = alias_roots(nodes, None)
    targets = {root.get(w, w) for n in nodes for w in graph_ops.written_args(n)}
    return [i for i in written if placeholders[i] in targets]


def is_restricted_view_requiring_grad(t: Any) -> bool:
    """A tensor view autograd forbids rebasing (its ``grad_fn`` raises once an alias is written), requiring grad."""
    return isinstance(t, torch.Tensor) and t.requires_grad and ti.is_view(t) and ti.is_restricted_view(t)


def restricted_view_aliasing(
    args: Sequence[Any], written: list[int], candidates: list[int] | None = None
) -> int | None:
    """The position of an input (among ``candidates``, default all) that is a restricted view requiring grad and
    shares storage with a written input."""
    restricted = [
        k
        for k in (range(len(args)) if candidates is None else candidates)
        if is_restricted_view_requiring_grad(args[k])
    ]
    if not restricted:
        return None
    storages = {_storage(args[i]) for i in written}
    return next((k for k in restricted if _storage(args[k]) in storages), None)


def _storage(t: Any) -> ti.StorageWeakRef | None:
    return ti.storage_ref(t)
