"""Behavioural probes: what a user can observe of a program's outputs, recorded so it can be compared with eager.

Each probe gets ``call``, which runs the program once on fresh (seeded, identical) inputs, and pokes the outputs
the way users do. A probe records plain values (numbers, strings, tensors, containers of them) and ``Raised``
for every step that raised, so one failing step does not hide the next. Two observations match when
``first_difference`` finds nothing: same structure, same exceptions (type and message), close values.
"""

from __future__ import annotations

import collections
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from .cases import Case, Inputs

SEED = 0
RTOL = 1e-4
ATOL = 1e-5


@dataclass(frozen=True)
class Raised:
    """An exception, as the user sees it: its type and (normalized) message."""

    type: str
    message: str

    @staticmethod
    def of(e: BaseException) -> Raised:
        # Object addresses differ from run to run; nothing else in a message is normalized. Non-builtin types
        # keep their module, so Dynamo's wrappers (torch._dynamo.exc.TorchRuntimeError) show as such.
        cls = type(e)
        name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        return Raised(name, re.sub(r"0x[0-9a-fA-F]+", "0x?", str(e)).strip())

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as e:  # every exception is an observation
        return Raised.of(e)


@dataclass
class Call:
    """One call of the program: its inputs, outputs, and the tensors the probes watch."""

    inputs: Inputs
    out: Any
    flat: list[Any]  # the pytree leaves of the outputs
    spec: str

    @property
    def tensors(self) -> list[tuple[int, torch.Tensor]]:
        return [(i, o) for i, o in enumerate(self.flat) if isinstance(o, torch.Tensor)]

    @property
    def watched(self) -> list[torch.Tensor]:
        """Input-side tensors, in a fixed order: flattened args, then extra bases, then leaves."""
        seen: set[int] = set()
        out: list[torch.Tensor] = []
        for t in [*pytree.tree_leaves(self.inputs.args), *self.inputs.extra, *self.inputs.leaves]:
            if isinstance(t, torch.Tensor) and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out


class Subject:
    """A compiled (or eager) program bound to a case; ``call()`` runs it on fresh inputs."""

    def __init__(self, program: Callable[..., Any], case: Case, device: str) -> None:
        self.program = program
        self.case = case
        self.device = device

    def call(self) -> Call:
        for p in self.case.params(self.device):
            p.grad = None  # module parameters outlive a call; their grads must not accumulate across probes
        inputs = self.case.inputs(torch.Generator().manual_seed(SEED), self.device)
        out = self.program(*inputs.args)
        flat, spec = pytree.tree_flatten(out)
        return Call(inputs, out, flat, str(spec))


# ---------------------------------------------------------------------------------------------------------
# Helpers shared by probes.
# ---------------------------------------------------------------------------------------------------------


def _grad_fn_name(t: torch.Tensor) -> str:
    fn = t.grad_fn  # may raise: eager checks a multi-output view's base lazily, here
    return "None" if fn is None else type(fn).__name__


def _view_grad_fn(t: torch.Tensor) -> str:
    # A non-view output's grad_fn is some compiled node by design; only views must carry eager's node.
    return _grad_fn_name(t) if t._is_view() else "<not a view>"


def _values(call: Call) -> dict[str, Any]:
    return {
        "outputs": [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in call.flat],
        "inputs": [w.detach().clone() for w in call.watched],
    }


def _versions(call: Call) -> list[int]:
    return [t._version for _, t in call.tensors] + [w._version for w in call.watched]


def _version_deltas(call: Call, before: list[int]) -> dict[str, list[int]]:
    # Deltas, not absolute versions: how often a program bumps a counter while it runs is not the question.
    after = _versions(call)
    deltas = [a - b for a, b in zip(after, before)]
    n = len(call.tensors)
    return {"outputs": deltas[:n], "inputs": deltas[n:]}


def _cotangent(t: torch.Tensor, index: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + index)
    return torch.randn(t.shape, dtype=t.dtype, generator=gen).to(t.device)


def _differentiable(call: Call) -> list[tuple[int, torch.Tensor]]:
    return [(i, t) for i, t in call.tensors if t.requires_grad]


def _leaf_grads(call: Call) -> list[torch.Tensor | None]:
    return [None if leaf.grad is None else leaf.grad.detach().clone() for leaf in call.inputs.leaves]


def _backward(call: Call, outputs: list[tuple[int, torch.Tensor]]) -> Any:
    if not outputs:
        return "no output requires grad"
    torch.autograd.backward([t for _, t in outputs], [_cotangent(t, i) for i, t in outputs])
    return _leaf_grads(call)


def _first_tensor(call: Call) -> torch.Tensor:
    tensors = call.tensors
    if not tensors:
        raise LookupError("the program returns no tensor")
    return tensors[0][1]


def _after_mutation(call: Call, mutate: Callable[[], Any]) -> dict[str, Any]:
    """Mutate, then record what changed: the values and version counters of everything, grad_fns, grads."""
    before = _versions(call)

    def run() -> None:
        mutate()  # success records None: the returned tensor is the output itself, already recorded

    record: dict[str, Any] = {"mutate": attempt(run)}
    record["versions"] = _version_deltas(call, before)
    record["values"] = _values(call)
    record["grad_fns"] = [attempt(lambda t=t: _view_grad_fn(t)) for _, t in call.tensors]
    record["backward"] = attempt(lambda: _backward(call, _differentiable(call)))
    return record


# ---------------------------------------------------------------------------------------------------------
# The probes.
# ---------------------------------------------------------------------------------------------------------


def probe_forward(call: Callable[[], Call]) -> Any:
    c = call()
    return {"structure": c.spec, "values": _values(c)}


class _Labels:
    """Names tensors the way a user would point at them: input k, output j, or the k-th other base."""

    def __init__(self, c: Call) -> None:
        self.ids: dict[int, str] = {id(w): f"input {k}" for k, w in enumerate(c.watched)}
        self.storages: dict[StorageWeakRef, str] = {}
        for w in c.watched:
            self.storages.setdefault(StorageWeakRef(w.untyped_storage()), self.ids[id(w)])
        self.others = 0
        self.keep: list[torch.Tensor] = []  # ids are only stable while the objects live

    def name(self, t: torch.Tensor) -> str:
        if id(t) not in self.ids:
            self.keep.append(t)
            self.ids[id(t)] = f"intermediate {self.others}"
            self.others += 1
        return self.ids[id(t)]

    def storage(self, t: torch.Tensor, owner: str) -> str:
        return self.storages.setdefault(StorageWeakRef(t.untyped_storage()), owner)


def probe_alias(call: Callable[[], Call]) -> Any:
    """Alias structure: which outputs are views, of what, sharing storage with what; requires_grad, is_leaf."""
    c = call()
    labels = _Labels(c)
    rows = []
    for i, t in c.tensors:
        same = labels.ids.get(id(t))  # the very same tensor object as an input or an earlier output
        if same is None:
            labels.ids[id(t)] = f"output {i}"
        base = t._base
        rows.append(
            {
                "identity": same or "new",
                "is_view": t._is_view(),
                "base": None if base is None else labels.name(base),
                "storage": labels.storage(t, f"output {i}"),
                "layout": (tuple(t.shape), t.stride(), t.storage_offset(), str(t.dtype)),
                "requires_grad": t.requires_grad,
                "is_leaf": attempt(lambda t=t: t.is_leaf),
            }
        )
    return rows


def probe_grad_fn(call: Callable[[], Call]) -> Any:
    """grad_fn of the outputs that are views (the others are some compiled node, by design)."""
    c = call()
    return [attempt(lambda t=t: _view_grad_fn(t)) for _, t in c.tensors]


def probe_backward(call: Callable[[], Call]) -> Any:
    c = call()
    return attempt(lambda: _backward(c, _differentiable(c)))


def probe_mutate_output(call: Callable[[], Call]) -> Any:
    c = call()
    target = _first_tensor(c)
    return _after_mutation(c, lambda: target.mul_(2))


def probe_mutate_view_of_output(call: Callable[[], Call]) -> Any:
    c = call()
    target = _first_tensor(c)
    return _after_mutation(c, lambda: target.unsqueeze(0).mul_(2))


def probe_mutate_no_grad(call: Callable[[], Call]) -> Any:
    c = call()
    target = _first_tensor(c)

    def mutate() -> None:
        with torch.no_grad():
            target.mul_(2)

    return _after_mutation(c, mutate)


def probe_detach_mutate(call: Callable[[], Call]) -> Any:
    c = call()
    target = _first_tensor(c)
    return _after_mutation(c, lambda: target.detach().mul_(2))


MAX_EACH = 6


def probe_mutate_each_output(call: Callable[[], Call]) -> Any:
    """Mutate each output in turn (the first and last few of long lists), each on a fresh call."""
    n = len(call().tensors)
    picks = list(range(n)) if n <= MAX_EACH else [*range(MAX_EACH // 2), *range(n - MAX_EACH // 2, n)]
    records = {}
    for k in picks:
        c = call()
        target = c.tensors[k][1]
        records[f"output {c.tensors[k][0]}"] = _after_mutation(c, lambda target=target: target.mul_(2))
    return records


def probe_backward_twice(call: Callable[[], Call]) -> Any:
    """Backward through one output, then another, without retain_graph."""
    c = call()
    outputs = _differentiable(c)
    if len(outputs) < 2:
        return "fewer than two outputs require grad"
    first = attempt(lambda: _backward(c, outputs[:1]))
    second = attempt(lambda: _backward(c, outputs[-1:]))
    return {"first": first, "second": second}


PROBES: dict[str, Callable[[Callable[[], Call]], Any]] = {
    "forward": probe_forward,
    "alias": probe_alias,
    "grad_fn": probe_grad_fn,
    "backward": probe_backward,
    "mutate_output": probe_mutate_output,
    "mutate_each_output": probe_mutate_each_output,
    "mutate_view_of_output": probe_mutate_view_of_output,
    "mutate_no_grad": probe_mutate_no_grad,
    "detach_mutate": probe_detach_mutate,
    "backward_twice": probe_backward_twice,
}


def run_probe(probe: Callable[[Callable[[], Call]], Any], subject: Subject) -> Any:
    """A probe's observation; if the program itself raises, that exception is the observation."""
    return attempt(lambda: probe(subject.call))


def autograd_nodes(subject: Subject) -> collections.Counter[str] | Raised:
    """Autograd nodes (by type) reachable from the outputs of one fresh call."""

    def count() -> collections.Counter[str]:
        c = subject.call()
        seen: set[Any] = set()
        stack = []
        for _, t in c.tensors:
            fn = attempt(lambda t=t: t.grad_fn)
            if fn is not None and not isinstance(fn, Raised):
                stack.append(fn)
        counts: collections.Counter[str] = collections.Counter()
        while stack:
            fn = stack.pop()
            if fn in seen:
                continue
            seen.add(fn)
            counts[type(fn).__name__] += 1
            stack.extend(f for f, _ in fn.next_functions if f is not None)
        return counts

    return attempt(count)


# ---------------------------------------------------------------------------------------------------------
# Comparing observations.
# ---------------------------------------------------------------------------------------------------------


def _tensor_difference(a: torch.Tensor, b: torch.Tensor) -> str | None:
    if a.shape != b.shape or a.dtype != b.dtype:
        return "shape or dtype"
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return None if torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True) else "values"
    return None if torch.equal(a, b) else "values"


def first_difference(expected: Any, actual: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """(path, expected part, actual part) of the first mismatch, or None when the observations match."""
    return next(differences(expected, actual, path), None)


def differences(expected: Any, actual: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every mismatch, in order: (path, expected part, actual part)."""
    here = path or "."
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        both = isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)
        if not both or _tensor_difference(expected, actual) is not None:
            yield here, expected, actual
    elif type(expected) is not type(actual):
        yield here, expected, actual
    elif isinstance(expected, dict):
        if list(expected) != list(actual):
            yield here, sorted(map(str, expected)), sorted(map(str, actual))
            return
        for k in expected:
            yield from differences(expected[k], actual[k], f"{path}.{k}")
    elif isinstance(expected, (list, tuple)):
        if len(expected) != len(actual):
            yield f"{here} (length)", len(expected), len(actual)
            return
        for k, (e, a) in enumerate(zip(expected, actual)):
            yield from differences(e, a, f"{path}[{k}]")
    elif isinstance(expected, float):
        if not math.isclose(expected, actual, rel_tol=RTOL, abs_tol=ATOL):
            yield here, expected, actual
    elif expected != actual:
        yield here, expected, actual


def describe(value: Any, limit: int = 300) -> str:
    """A short, readable rendering of (part of) an observation."""
    text = _describe(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        flat = value.detach().cpu().reshape(-1)
        shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat[:4].tolist())
        more = ", ..." if flat.numel() > 4 else ""
        return f"tensor{list(value.shape)}[{shown}{more}]"
    if isinstance(value, Raised):
        return f"raises {value}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)
