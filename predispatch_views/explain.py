"""``explain(fn, *args)``: every stage's artifact for one program, and the autograd graph it produces.

The stages are those of ``pipeline.compile_captured`` on the capture of ``fn`` (the no-Dynamo path of
``compile_function``): the pre-dispatch graph, the view-preserving functional graph (epilogue nodes marked), the
core graph handed to the inner backend, the epilogue (graph and the generated straight-line source), and the
fallback reason if the program went to stock AOTAutograd. Then ``fn`` is run under eager, stock
(``torch.compile(fn, backend=inner)``) and the explained program, and the autograd graph of the outputs is
summarized: node counts by type, reachable from the outputs' ``grad_fn`` (``AccumulateGrad`` excluded), and
whether the outputs are views of a shared base.

Each run gets its own copies of the tensor arguments (``detach().clone()``, ``requires_grad`` kept), so a
program that mutates its inputs does not see the previous run's mutations. If tensor arguments alias each other
they are passed as given instead, so that the aliasing the pipeline sees is preserved.

Command line: ``python -m predispatch_views explain MODULE:FUNCTION --args "randn(50, 50, requires_grad=True)"``
(``--kwargs "dim=1"`` for keyword arguments). It exits with 1 when the program raises under eager or compiling it
raises (both in the report's "errors" section, not among the fallback reasons), 2 on a bad target or expression.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from .function_capture import capture_closure
from .functionalize import EPILOGUE_TAG
from .inner_backend import cpu_seconds
from .labels import LABEL_KEY, function_label
from .outcomes import FALLBACKS, segments_of
from .pipeline import CompiledProgram, InnerBackend, compile_captured

__all__ = ["AutogradSummary", "Explanation", "explain", "render_graph"]


@dataclass(frozen=True)
class AutogradSummary:
    """The autograd graph the outputs of one strategy carry."""

    label: str
    # Autograd node type -> count, over the nodes reachable from the outputs' grad_fn (AccumulateGrad
    # excluded), in the order a breadth-first walk from the outputs first meets each type.
    node_counts: dict[str, int] = field(default_factory=dict)
    n_outputs: int = 0  # tensor outputs
    n_views: int = 0  # tensor outputs that are views (``_is_view()``)
    n_bases: int = 0  # distinct ``_base`` among those views
    grad_fn_raises: int = 0  # outputs whose ``grad_fn`` access raises (eager does that lazily, by design)
    error: str | None = None  # the strategy itself raised

    def render(self) -> str:
        if self.error is not None:
            return f"raised {self.error}"
        views = f"{self.n_views} views of {self.n_bases} base{'s' if self.n_bases != 1 else ''}"
        text = f"{json.dumps(self.node_counts)}; {self.n_outputs} outputs, {views if self.n_views else '0 views'}"
        if self.grad_fn_raises:
            text += f"; grad_fn raises on {self.grad_fn_raises}"
        return text


@dataclass
class Explanation:
    """What ``explain`` found. Graphs are kept as GraphModules; ``str()`` renders the report."""

    name: str
    inner: str
    program: CompiledProgram
    autograd: dict[str, AutogradSummary]  # "eager", "stock[inner]", "prototype[inner]"
    # Reasons the pipeline logged while compiling this program (see pipeline.FALLBACKS).
    logged_fallbacks: list[str] = field(default_factory=list)
    # compile_captured itself raised: a fallback to stock AOTAutograd fails where stock fails.
    compile_error: str | None = None

    @property
    def pre_dispatch(self) -> fx.GraphModule | None:
        return self.program.pre_dispatch

    @property
    def functional(self) -> fx.GraphModule | None:
        return self.program.functional

    @property
    def core(self) -> fx.GraphModule | None:
        return None if self.program.sliced is None else self.program.sliced.core

    @property
    def core_is_empty(self) -> bool:
        return self.program.sliced is not None and self.program.sliced.core_is_empty

    @property
    def epilogue(self) -> fx.GraphModule | None:
        return None if self.program.sliced is None else self.program.sliced.epilogue

    @property
    def epilogue_source(self) -> str | None:
        return self.program.epilogue_source

    @property
    def errors(self) -> list[str]:
        """What raised: the program itself under eager, and compiling it with the prototype."""
        out = []
        eager = self.autograd.get("eager")
        if eager is not None and eager.error is not None:
            out.append(f"the program raises under eager: {eager.error}")
        if self.compile_error is not None:
            out.append(f"compiling with the prototype raised {self.compile_error}")
        return out

    @property
    def fallback_reasons(self) -> list[str]:
        reasons = [] if self.program.fallback_reason is None else [self.program.fallback_reason]
        return reasons + [r for r in self.logged_fallbacks if r not in reasons]

    def sections(self) -> dict[str, str]:
        """Section title -> body, in the order the report prints them."""
        fell_back = (
            "(none: the program fell back to stock AOTAutograd)"
            if self.fallback_reasons
            else "(none: compiling raised, see the errors)"
        )
        out: dict[str, str] = {}
        out["pre-dispatch graph"] = render_graph(self.pre_dispatch) if self.pre_dispatch else "(not captured)"
        if self.program.segments:  # Note [Segments] in segments.py: each segment's own stages
            segments = segments_of(self.program)
            out["segments"] = f"cut into {len(segments)} segments, run in order:\n" + "\n".join(
                note for p in [self.program, *self.program.segments] for note in p.notes
            )
            for k, segment in enumerate(segments):
                sliced = segment.sliced
                out[f"segment {k}: view-preserving functional graph"] = render_graph(
                    segment.functional, mark_epilogue=True
                )
                out[f"segment {k}: core graph"] = render_graph(sliced.core) if sliced is not None else "(none)"
                out[f"segment {k}: epilogue source"] = (segment.epilogue_source or "(none)").rstrip()
            out["fallback reasons"] = "\n".join(self.fallback_reasons) or "none"
            self._autograd_section(out)
            return out
        out["view-preserving functional graph (# epilogue: replayed in eager)"] = (
            render_graph(self.functional, mark_epilogue=True) if self.functional is not None else fell_back
        )
        core_title = f"core graph (handed to {self.inner})"
        if self.core is None:
            out[core_title] = fell_back
        elif self.core_is_empty:
            out[core_title] = render_graph(self.core) + "\n(empty: not compiled, the epilogue reads the inputs)"
        else:
            out[core_title] = render_graph(self.core)
            parts = self.program.sliced.parts if self.program.sliced is not None else ()
            if len(parts) > 1:  # Note [Independent parts of the core] in slicing.py
                out[core_title] += f"\n(compiled as {len(parts)} independent parts, one autograd node each)"
                for j, part in enumerate(parts):
                    inputs = ", ".join(map(str, part.inputs))
                    out[f"core part {j} (inputs {inputs}; core outputs {', '.join(map(str, part.outputs))})"] = (
                        render_graph(part.graph)
                    )
        out["epilogue graph"] = render_graph(self.epilogue) if self.epilogue is not None else fell_back
        out["epilogue source (run on every call)"] = (
            self.epilogue_source.rstrip() if self.epilogue_source is not None else fell_back
        )
        out["fallback reasons"] = "\n".join(self.fallback_reasons) or "none"
        self._autograd_section(out)
        return out

    def _stage_times(self) -> str:
        """CPU milliseconds per compile stage, of the program and of each segment (Note [Segments])."""
        lines = []
        for k, p in enumerate([self.program, *segments_of(self.program)] if self.program.segments else [self.program]):
            if p.stage_seconds:
                label = "program" if k == 0 else f"segment {k - 1}"
                lines.append(f"{label}: " + ", ".join(f"{s} {t * 1e3:.1f}" for s, t in p.stage_seconds.items()))
        return "\n".join(lines) or "(none recorded)"

    def _autograd_section(self, out: dict[str, str]) -> None:
        width = max((len(k) for k in self.autograd), default=0) + 1
        out["autograd graph of the outputs (node counts by type, AccumulateGrad excluded)"] = "\n".join(
            f"{(k + ':').ljust(width)} {s.render()}" for k, s in self.autograd.items()
        )
        if self.errors:
            out["errors"] = "\n".join(self.errors)
        out[STAGE_TIMES] = self._stage_times()  # last: the only section that differs between runs

    def __str__(self) -> str:
        parts = [f"explain {self.name} (inner backend: {self.inner})"]
        for i, (title, body) in enumerate(self.sections().items(), 1):
            parts.append(f"== {i}. {title} ==\n{body}")
        return "\n\n".join(parts) + "\n"


STAGE_TIMES = "compile time by stage (CPU ms, this process and gcc)"


def explain(fn: Callable[..., Any], *args: Any, inner: InnerBackend = "aot_eager", **kwargs: Any) -> Explanation:
    """Compile ``fn`` for these arguments with the prototype and report every stage (see the module doc)."""
    flat, in_spec = ti.tree_flatten((args, kwargs))
    tensor_positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    tensors = [flat[i] for i in tensor_positions]

    def calling(f: Callable[..., Any]) -> Callable[[Sequence[torch.Tensor]], Any]:
        def call(tensor_args: Sequence[torch.Tensor]) -> Any:
            values = list(flat)
            for i, t in zip(tensor_positions, tensor_args):
                values[i] = t
            a, kw = ti.tree_unflatten(values, in_spec)
            return f(*a, **kw)

        return call

    eager = calling(fn)

    def flat_fn(*tensor_args: torch.Tensor) -> list[Any]:
        return ti.tree_leaves(eager(tensor_args))

    before = list(FALLBACKS)  # kept alive so that ids of old entries cannot be reused by new ones
    logged_before = {id(entry) for entry in before}
    compile_error = None
    lifted: list[torch.Tensor] = []  # closed-over tensors (a module's parameters...): trailing inputs
    start = cpu_seconds()
    try:
        capture = capture_closure(flat_fn, tensors)
        graph, lifted = capture.graph, capture.lifted
        graph.meta[LABEL_KEY] = function_label(fn)
    except Exception as e:  # the program cannot be traced (often: eager raises too)
        compile_error = f"in the pre-dispatch capture: {_describe(e)}"
        program = CompiledProgram(run=_raise(e))
    else:
        captured_in = cpu_seconds() - start
        try:
            program = compile_captured(graph, tensors + lifted, inner)
            program.stage_seconds = {"capture": captured_in, **program.stage_seconds}
        except Exception as e:  # e.g. the fallback to stock fails to compile, as stock does
            compile_error = _describe(e)
            program = CompiledProgram(run=_raise(e), pre_dispatch=graph)
    logged = [reason for entry in FALLBACKS if id(entry) not in logged_before for reason in entry[1:]]
    inner_name = inner if isinstance(inner, str) else getattr(inner, "__name__", repr(inner))
    runs: dict[str, Callable[[Sequence[torch.Tensor]], Any]] = {
        "eager": eager,
        f"stock[{inner_name}]": calling(torch.compile(fn, backend=inner, dynamic=False)),
        f"prototype[{inner_name}]": lambda t: program.run(*t, *lifted),
    }
    autograd = {label: _summarize(label, run, tensors) for label, run in runs.items()}
    return Explanation(getattr(fn, "__name__", repr(fn)), inner_name, program, autograd, logged, compile_error)


def _raise(error: Exception) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        raise error

    return run


def _copies(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    storages = {ti.storage_ref(t) for t in tensors}
    if len(storages) < len(tensors):
        return list(tensors)
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _summarize(
    label: str, run: Callable[[Sequence[torch.Tensor]], Any], tensors: Sequence[torch.Tensor]
) -> AutogradSummary:
    try:
        outs = [o for o in ti.tree_leaves(run(_copies(tensors))) if isinstance(o, torch.Tensor)]
    except Exception as e:  # the strategy's failure is part of the explanation
        return AutogradSummary(label, error=_describe(e))
    counts: collections.Counter[str] = collections.Counter()
    order: list[str] = []
    seen: set[Any] = set()
    queue: collections.deque[Any] = collections.deque()
    raises = 0
    for o in outs:
        try:
            queue.append(o.grad_fn)
        except RuntimeError:  # a view whose base was mutated after it was taken: eager errors lazily
            raises += 1
    while queue:
        node = queue.popleft()
        if node is None or node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        if name != "AccumulateGrad":
            if name not in counts:
                order.append(name)
            counts[name] += 1
        queue.extend(f for f, _ in node.next_functions)
    views = [o for o in outs if ti.is_view(o)]
    bases = {id(o._base) for o in views}
    return AutogradSummary(
        label,
        node_counts={name: counts[name] for name in order},
        n_outputs=len(outs),
        n_views=len(views),
        n_bases=len(bases),
        grad_fn_raises=raises,
    )


def _describe(e: Exception) -> str:
    """The exception in one line: Dynamo's BackendCompilerFailed keeps the inner error on its second line."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Set TORCHDYNAMO_VERBOSE", "For even more"))]
    return f"{type(e).__name__}: {' '.join(lines)}"


_DELETES = re.compile(r";\s+[\w\s=]+ = None$")
_DEFINED = re.compile(r"^\s*(\w+)(?::| =)")


def render_graph(gm: fx.GraphModule, *, mark_epilogue: bool = False) -> str:
    """``print_readable`` without the class line, comments and ``x = None`` deletions; shapes kept."""
    text = gm.print_readable(print_output=False, include_stride=False, include_device=False)
    tagged = {n.name for n in gm.graph.nodes if n.meta.get(EPILOGUE_TAG)} if mark_epilogue else set()
    lines = []
    for line in text.splitlines()[1:]:
        if not line.strip() or line.strip().startswith("#"):
            continue
        line = _DELETES.sub("", line.rstrip())
        line = line[4:] if line.startswith("    ") else line
        defined = _DEFINED.match(line)
        if defined and defined.group(1) in tagged:
            line += "  # epilogue"
        lines.append(line)
    return "\n".join(lines)
