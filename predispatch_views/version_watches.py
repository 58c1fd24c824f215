"""Stage 4b: the runtime's version watches. Where a compiled backward cannot raise eager's version error where and
as eager's does, a pre-hook on the compiled node raises it.

Note [Eager's version error]
A core output eager's own node saves for backward (an op whose backward reads its result: ``tanh``, ``sigmoid``,
``exp``, ``relu``), written in place by the caller, makes eager's backward raise "one of the variables needed for
gradient computation has been modified by an inplace operation: [torch.FloatTensor [3, 4]], which is output 0 of
Tanh, is at version 1; expected version 0 instead. ...". The compiled backward saved the compiled function's own
output, a tensor no node of eager's made, so its message lacks ", which is output 0 of Tanh" (stock's too); or
the partitioner recomputed the value from the inputs and the compiled backward runs where eager's raises. The
runtime watches each such output: a pre-hook on its compiled node raises eager's error, naming eager's node
(_torch_internals.eager_node_name), when a gradient reaches the node at an output computed from it (where
eager's backward reaches the node that saved it) and its version has moved since the core returned it. Not where
compiled autograd is configured when the graph compiles: its reordering of traced pre-hooks raised StopIteration
on this hook (tests/test_interactions.py); a hook met under compiled autograd returns without raising. The
price: one pre-hook per call and watched output (about 10-15 us of CPU, mostly ``register_prehook``); a program
whose outputs no such op made pays nothing. The same watch serves two more cases:
- an output whose alias a core op saves: Note [A saved alias of a value the caller can write] in saved_aliases.py;
- an input whose view a core op saves: Note [A saved view of an input the epilogue views] in saved_aliases.py.
"""

from __future__ import annotations

import functools
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx

from . import _torch_internals as ti
from . import graph_ops
from .fallbacks import Fallback, FallbackKind
from .saved_aliases import VersionWatch, result_watch_name, separated_value, tensor_readers
from .slicing import SlicedProgram


def watch_lines(sliced: SlicedProgram, core_output: dict[int, str], bind: Callable[[Any, str], str]) -> list[str]:
    """The epilogue's lines that set the core's watches up, right after the core returns."""
    if ti.compiled_autograd_configured():
        return []
    lines = []
    for w in core_watches(sliced):
        watched = core_output[w.index] if w.source == "output" else f"args[{w.index}]"
        strong = w.source == "input" or w.held_strongly
        fn = bind(functools.partial(watch, strong=strong, name=w.name, shape=w.shape), "_watch")
        lines.append(f"{fn}({watched}, ({''.join(core_output[j] + ', ' for j in w.readers)}))")
    return lines


def core_watches(sliced: SlicedProgram) -> list[VersionWatch]:
    return saved_results(sliced.core) + list(sliced.saved_alias_watches)


def saved_results(core: fx.GraphModule) -> list[VersionWatch]:
    """Each core output whose op's backward reads its result (Note [Eager's version error])."""
    # A value returned through its separating alias (saved_aliases.py) is watched as the value itself.
    returned = [separated_value(n) for n in graph_ops.as_tuple(core.graph.output_node().args[0])]
    found = []
    for k, n in enumerate(returned):
        if not isinstance(n, fx.Node) or n.op not in ("call_function", "call_method"):
            continue
        if (name := result_watch_name(n)) is not None:
            below = graph_ops.descendants(n)
            readers = tensor_readers(returned, below | {n})
            found.append(VersionWatch("output", k, readers, name, held_strongly=ti.is_marked_must_recompute(n)))
    return found


def fallback_under_compiled_autograd(sliced: SlicedProgram, example_inputs: Sequence[Any]) -> Fallback | None:
    """Note [A saved view of an input the epilogue views] in saved_aliases.py: its check is a pre-hook, which
    compiled autograd does not run, so there the graph goes to stock."""
    if not ti.compiled_autograd_configured():
        return None
    for w in sliced.saved_alias_watches:
        if w.source == "input" and getattr(example_inputs[w.index], "requires_grad", False):
            return Fallback(
                FallbackKind.SAVED_INPUT_VIEW_UNDER_COMPILED_AUTOGRAD,
                f"an op of the compiled region saves a view of input {w.index} for backward, which the epilogue views "
                "too: with compiled autograd on, no pre-hook checks that input's version where the compiled backward "
                "may not",
            )
    return None


def watching_saved_results(gm: fx.GraphModule, run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` (Dynamo's graph compiled whole), watching the outputs eager's nodes save (Note [Eager's version
    error]); ``run`` itself where there are none."""
    watched = saved_results(gm)
    if not watched or ti.compiled_autograd_configured():
        return run

    def watching(*args: Any) -> Any:
        outs = run(*args)
        for w in watched:
            watch(outs[w.index], tuple(outs[j] for j in w.readers), strong=False, name=w.name)
        return outs

    return watching


def watch(
    t: torch.Tensor,
    readers: tuple[torch.Tensor, ...],
    *,
    strong: bool,
    name: str | None,
    shape: tuple[int, ...] | None = None,
) -> None:
    """Raise eager's error where eager's backward would meet a saved ``t`` (or a saved alias of it) written."""
    if name is not None and not t.requires_grad:
        # An op's own result (saved_results names the op): saved only where autograd recorded the op. A saved
        # alias's saver is recorded by construction, whatever the flag of the value it saves (s1812_1567).
        return
    node = next((r.grad_fn for r in readers if r.grad_fn is not None), None)
    if node is None:
        return
    positions = [r.output_nr for r in readers if r.grad_fn is node]
    # An output is held weakly: a strong reference keeps the output, its node and what that saved alive in a cycle.
    held: Callable[[], torch.Tensor | None] = _holder(t.detach()) if strong else weakref.ref(t)
    node.register_prehook(functools.partial(_check, held, t._version, positions, name, shape))


def _holder(t: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: t


def _check(
    held: Callable[[], torch.Tensor | None],
    version: int,
    positions: list[int],
    name: str | None,
    shape: tuple[int, ...] | None,
    grads: tuple[Any, ...],
) -> None:
    """The pre-hook."""
    t = held()
    if t is None or t._version == version or all(grads[p] is None for p in positions):
        return
    if ti.compiled_autograd_configured():  # asked only here: reading Dynamo's config costs microseconds
        return
    hint = (
        "the backtrace further above shows the operation that failed to compute its gradient. The variable in "
        "question was changed in there or anywhere later. Good luck!"
        if torch.is_anomaly_enabled()
        else "enable anomaly detection to find the operation that failed to compute its gradient, with "
        "torch.autograd.set_detect_anomaly(True, check_nan=False)."
    )
    made_by = f", which is output 0 of {name}," if name is not None else ""
    if name is None and shape is None and t.grad_fn is not None:  # eager names the saved value's node as it is now
        made_by = f", which is output {t.output_nr} of {_BACKWARD_SUFFIX.sub('', t.grad_fn.name())},"
    raise RuntimeError(
        "one of the variables needed for gradient computation has been modified by an inplace operation: "
        f"[{t.type()} {list(t.shape if shape is None else shape)}]{made_by} is at version {t._version}; expected "
        f"version {version} instead. Hint: {hint}"
    )


_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
