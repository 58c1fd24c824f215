"""Random programs for the differential fuzzer: a list of statements, printable as Python and executable.

A ``Program`` is an input recipe plus a body of ``Stmt`` (one or a few lines of source each, with the names they
define and use) and the names it returns. ``generate(seed, index)`` builds one from a ``random.Random`` seeded by
``(seed, index)`` alone, so a program is reproducible from those two numbers. The generator tracks each variable's
shape (and roughly its contiguity, and whether in-place ops on it raise in eager) so that most programs run in
eager; those that raise are valid too: the expected behaviour of a compiled strategy is then eager's error.

``Program.source()`` is a self-contained script (inputs and function), and ``Program.function()`` execs exactly that
source, so Dynamo traces real bytecode. ``shrink`` deletes outputs and statements (delta-debugging) while a
predicate still holds.

Note [Fuzz dimensions]
``generate(seed, index)`` is the classic generator, unchanged: the documented seeds reproduce it byte for byte.
``generate(seed, index, dimensions)`` adds what the classic one never generated, drawn from a second random
stream (``fuzz-dimensions:seed:index``) after the classic program is complete, so the classic statements stay
as they were and the new ones are inserted between them:
- ``out``: ``out=`` calls (``torch.sin(x, out=t)``, ``torch.add(x, y, out=t)``, ``torch.max(x, 0, out=(v, i))``)
  into fresh tensors, intermediates and inputs;
- ``inputs``: an int input ``k``, a list of tensors ``xs`` passed as one argument, a None input ``opt``;
- ``sizes``: the program is called again, twice, with inputs of other sizes along one dimension (and other
  values of ``k``), so that the same compiled function recompiles with automatic dynamic shapes (SymInts);
- ``grad_mode``: the whole call made under ``torch.no_grad()`` or ``torch.inference_mode()``.
Two more dimensions are strategy settings, not programs (fuzz.py): ``dynamic`` (``dynamic=True``) and
``compiled_autograd``; each program draws one of those asked for (a third stream), under which stock and the backend
run it besides torch.compile's default. Programs with new program dimensions are named
``fuzz_s<seed>_<index>_<dimensions>``.
"""

from __future__ import annotations

import contextlib
import linecache
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.utils._pytree as pytree

from .cases import Case, Inputs

# ---------------------------------------------------------------------------------------------------------
# Custom autograd.Functions the programs call (imported by name in the generated source).
# ---------------------------------------------------------------------------------------------------------


class ReturnsInput(torch.autograd.Function):
    """Returns its input unchanged; the backward halves the gradient (issue 9, class 1)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 0.5


class ScaledClone(torch.autograd.Function):
    """Returns a clone; the backward triples the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 3.0


class MarkDirty(torch.autograd.Function):
    """Doubles its input in place and marks it dirty."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2.0)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 2.0


HEADER = (
    "import torch\n"
    "import torch.nn.functional as F\n"
    "from predispatch_views.compare.fuzz_program import MarkDirty, ReturnsInput, ScaledClone\n"
)

# ---------------------------------------------------------------------------------------------------------
# The representation.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stmt:
    code: str  # one or more lines, unindented
    defines: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    kind: str = ""


@dataclass(frozen=True)
class Program:
    seed: int
    index: int
    inputs: tuple[str, ...]  # the argument names
    input_code: tuple[str, ...]  # body of make_inputs(gen), ending in its return
    body: tuple[Stmt, ...]
    outputs: tuple[str, ...]
    # Note [Fuzz dimensions]: make_inputs' keyword parameters and their values on the first call, their values on
    # each further call of the same compiled function, the grad mode every call is made under, the name's suffix.
    params: tuple[tuple[str, int], ...] = ()
    calls: tuple[tuple[int, ...], ...] = ()
    call_mode: str = ""  # "", "no_grad" or "inference_mode"
    tag: str = ""
    # The strategy settings (fuzz.py) this program also runs under, besides torch.compile's default.
    settings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"fuzz_s{self.seed}_{self.index}" + (f"_{self.tag}" if self.tag else "")

    @property
    def call_params(self) -> list[dict[str, int]]:
        """make_inputs' keyword arguments of each call (one call, with none, for a classic program)."""
        names = [name for name, _ in self.params]
        first = tuple(value for _, value in self.params)
        return [dict(zip(names, values)) for values in (first, *self.calls)]

    def source(self) -> str:
        signature = "".join(f", {name}={value}" for name, value in self.params)
        lines = [HEADER, "", f"def make_inputs(gen{signature}):"]
        lines += [f"    {line}" for line in self.input_code]
        lines += ["", "", f"def program({', '.join(self.inputs)}):"]
        for stmt in self.body:
            lines += [f"    {line}" for line in stmt.code.splitlines()]
        lines.append(f"    return ({''.join(o + ', ' for o in self.outputs).rstrip()})")
        if self.calls:
            lines += ["", "", "# The same (compiled) program is called once with each of these inputs, in order."]
            lines.append(f"CALLS = {self.call_params!r}")
        if self.call_mode:
            lines += ["", "", "def call(fn, *args):", f"    with torch.{self.call_mode}():", "        return fn(*args)"]
        return "\n".join(lines) + "\n"

    def namespace(self) -> dict[str, Any]:
        source = self.source()
        filename = f"<{self.name}>"
        # Registered so that tracebacks, inspect and Dynamo can read the source back.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        ns: dict[str, Any] = {"__name__": f"fuzz_{self.name}"}
        exec(compile(source, filename, "exec"), ns)
        return ns

    def function(self) -> Callable[..., Any]:
        fn = self.namespace()["program"]
        fn.fuzz_source = self.source()
        return fn

    def case(self) -> Case:
        return self.cases()[0]

    def cases(self) -> list[Case]:
        """One case per call (Note [Fuzz dimensions]), all with the same function object."""
        ns = self.namespace()
        fn, make_inputs = ns["program"], ns["make_inputs"]
        fn.fuzz_source = self.source()

        def factory_for(params: dict[str, int]) -> Callable[[torch.Generator, str], Inputs]:
            def factory(gen: torch.Generator, device: str) -> Inputs:
                if device != "cpu":
                    raise NotImplementedError("fuzz programs build their inputs on the CPU")
                args, leaves, extra = make_inputs(gen, **params)
                return Inputs(tuple(args), tuple(leaves), tuple(extra))

            return factory

        return [Case(self.name, fn, factory_for(params)) for params in self.call_params]

    def without(self, drop: set[int]) -> Program | None:
        """The program minus statements ``drop`` and every statement or output that used what they defined."""
        defined = set(self.inputs)
        kept: list[Stmt] = []
        for k, stmt in enumerate(self.body):
            if k in drop or not {use.split("[")[0] for use in stmt.uses} <= defined:  # xs[0] is input xs
                continue
            kept.append(stmt)
            defined.update(stmt.defines)
        outputs = tuple(o for o in self.outputs if o in defined)
        if not outputs:
            return None
        return replace(self, body=tuple(kept), outputs=outputs)


# ---------------------------------------------------------------------------------------------------------
# The generator.
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Var:
    name: str
    shape: tuple[int, ...]
    contiguous: bool = True
    grad: bool = True
    # In-place ops on it under grad mode raise in eager (a leaf or a view of one, a multi-output view, a view
    # made under no_grad): the generator mostly mutates those under no_grad.
    guarded: bool = False
    is_input: bool = False
    is_view: bool = False
    expanded: bool = False  # internal overlap: in-place writes raise
    integral: bool = False  # an int64 tensor (out= indices): the new dimensions' makers do not compute on it
    exact: bool = True  # the shape is known (False: it depends on the int input k)


@dataclass
class _State:
    rng: random.Random
    vars: list[Var] = field(default_factory=list)
    body: list[Stmt] = field(default_factory=list)
    counter: int = 0
    # The live variables after each statement (copies: metadata mutations change a Var), for the new dimensions.
    snapshots: list[list[Var]] = field(default_factory=list)
    prefix: str = "t"  # the new dimensions' statements define u0, u1...

    def fresh(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter - 1}"

    def pick(self, pred: Callable[[Var], bool] = lambda v: True, recent: bool = True) -> Var | None:
        pool = [v for v in self.vars if pred(v)]
        if not pool:
            return None
        if recent and self.rng.random() < 0.6:
            return pool[-1] if self.rng.random() < 0.5 else self.rng.choice(pool[-3:])
        return self.rng.choice(pool)

    def emit(self, code: str, uses: Sequence[Var], defines: Sequence[Var] = (), kind: str = "") -> None:
        self.body.append(Stmt(code, tuple(v.name for v in defines), tuple(dict.fromkeys(v.name for v in uses)), kind))
        self.vars.extend(defines)
        self.snapshots.append([replace(v) for v in self.vars])


def _shape(s: Sequence[int | str]) -> str:
    return "(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"


def _derived(st: _State, x: Var, shape: Sequence[int], **kw: Any) -> Var:
    base = {"grad": x.grad, "contiguous": x.contiguous, "guarded": False, "expanded": False}
    base.update(kw)
    return Var(st.fresh(), tuple(shape), **base)


def _view_of(st: _State, x: Var, shape: Sequence[int], **kw: Any) -> Var:
    kw.setdefault("contiguous", False)
    kw.setdefault("guarded", x.guarded)
    kw.setdefault("expanded", x.expanded)
    return _derived(st, x, shape, is_view=True, **kw)


@dataclass
class _Recipe:
    """How make_inputs builds one argument (Note [Fuzz dimensions] adds the last three kinds)."""

    kind: str  # leaf, nonleaf, const, aliased (two arguments); list, int, none
    names: tuple[str, ...]
    shape: tuple[int, ...] = ()
    overlap: bool = False  # aliased: the two views overlap
    grads: tuple[bool, ...] = ()  # list: which elements require grad


def _inputs(rng: random.Random, st: _State) -> list[_Recipe]:
    """Input recipes: leaves, non-leaf inputs, inputs without grad, and pairs of views of one base."""
    recipes: list[_Recipe] = []
    letters = iter("abcdefgh")
    n = rng.choice([1, 1, 2, 2, 3])
    for _ in range(n):
        shape = tuple(rng.randint(1, 4) for _ in range(rng.choice([1, 2, 2, 3])))
        kind = rng.choices(["leaf", "nonleaf", "const", "aliased"], [4, 3, 2, 2])[0]
        if kind == "aliased":
            first, second = next(letters), next(letters)
            recipes.append(_Recipe(kind, (first, second), shape, overlap=rng.random() < 0.5))
            for name in (first, second):
                st.vars.append(Var(name, shape, contiguous=True, is_input=True, is_view=True))
            continue
        name = next(letters)
        recipes.append(_Recipe(kind, (name,), shape))
        if kind == "leaf":
            st.vars.append(Var(name, shape, is_input=True, guarded=True))
        elif kind == "nonleaf":
            st.vars.append(Var(name, shape, is_input=True))
        else:
            st.vars.append(Var(name, shape, is_input=True, grad=False))
    return recipes


SIZE_PARAM = "n"  # make_inputs' parameter: the size that changes between calls
INT_PARAM = "k"  # the int input, also a parameter of make_inputs


def _render_inputs(recipes: Sequence[_Recipe], vary: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The body of make_inputs; ``vary = (recipe, dim)``: that dimension's size is the parameter ``n``."""
    code: list[str] = []
    names: list[str] = []
    leaves: list[str] = []
    extra: list[str] = []
    for k, recipe in enumerate(recipes):
        shape: list[int | str] = list(recipe.shape)
        if vary is not None and vary[0] == k:
            shape[vary[1]] = SIZE_PARAM
        names += recipe.names
        if recipe.kind == "aliased":
            first, second = recipe.names
            if recipe.overlap:
                head = shape[0] + 1 if isinstance(shape[0], int) else f"{shape[0]} + 1"
                base_shape = [head, *shape[1:]]
            else:
                base_shape = [2, *shape]
            code += [
                f"{first}_base = torch.randn({_shape(base_shape)}, generator=gen).requires_grad_()",
                f"{first}_source = {first}_base.mul(1)",
                f"{first}, {second} = "
                + (
                    f"{first}_source[:-1], {first}_source[1:]"
                    if recipe.overlap
                    else f"{first}_source[0], {first}_source[1]"
                ),
            ]
            leaves.append(f"{first}_base")
            extra.append(f"{first}_source")
            continue
        name = recipe.names[0]
        if recipe.kind == "leaf":
            code.append(f"{name} = torch.randn({_shape(shape)}, generator=gen).requires_grad_()")
            leaves.append(name)
        elif recipe.kind == "nonleaf":
            code += [
                f"{name}_base = torch.randn({_shape(shape)}, generator=gen).requires_grad_()",
                f"{name} = {name}_base.mul(1)",
            ]
            leaves.append(f"{name}_base")
        elif recipe.kind == "const":
            code.append(f"{name} = torch.randn({_shape(shape)}, generator=gen)")
        elif recipe.kind == "list":
            elements = [
                f"torch.randn({_shape(shape)}, generator=gen)" + (".requires_grad_()" if grad else "")
                for grad in recipe.grads
            ]
            code.append(f"{name} = [{', '.join(elements)}]")
            leaves += [f"{name}[{j}]" for j, grad in enumerate(recipe.grads) if grad]
        elif recipe.kind == "none":
            code.append(f"{name} = None")
        # an int input is make_inputs' parameter of the same name: nothing to build
    tup = lambda xs: "(" + "".join(x + ", " for x in xs).rstrip() + ")"  # noqa: E731
    code.append(f"return {tup(names)}, {tup(leaves)}, {tup(extra)}")
    return tuple(code)


# Each statement maker returns False when nothing suitable is live (the generator then tries another kind).


def _pointwise(st: _State) -> bool:
    rng = st.rng
    x = st.pick()
    if x is None:
        return False
    r = rng.random()
    if r < 0.15:
        y = st.pick(lambda v: v.shape == x.shape and v is not x, recent=False)
        if y is not None:
            op = rng.choice(["+", "*", "-"])
            out = _derived(st, x, x.shape, grad=x.grad or y.grad, contiguous=x.contiguous and y.contiguous)
            st.emit(f"{out.name} = {x.name} {op} {y.name}", [x, y], [out], "pointwise")
            return True
    if r < 0.25 and len(x.shape) == 2:
        out = _derived(st, x, (x.shape[0], x.shape[0]), contiguous=True)
        st.emit(f"{out.name} = {x.name} @ {x.name}.t()", [x], [out], "matmul")
        return True
    if r < 0.3 and x.shape:
        d = rng.randrange(len(x.shape))
        out = _derived(st, x, x.shape[:d] + x.shape[d + 1 :], contiguous=True)
        st.emit(f"{out.name} = {x.name}.sum({d})", [x], [out], "reduction")
        return True
    op = rng.choice(["sin()", "cos()", "tanh()", "sigmoid()", "exp()", "mul(2.0)", "add(1.0)", "mul(-0.5)", "clone()"])
    out = _derived(st, x, x.shape, contiguous=x.contiguous and not x.expanded)
    st.emit(f"{out.name} = {x.name}.{op}", [x], [out], "pointwise")
    return True


def _single_view(st: _State, under_no_grad: bool = False) -> bool:
    rng = st.rng
    x = st.pick(lambda v: len(v.shape) >= 1)
    if x is None:
        return False
    s = x.shape
    nd = len(s)
    d = rng.randrange(nd)
    options: list[tuple[str, tuple[int, ...], dict[str, Any]]] = []
    if x.contiguous and not x.expanded:
        flat = 1
        for k in s:
            flat *= k
        options.append(("view(-1)", (flat,), {"contiguous": True}))
        if nd == 2:
            options.append((f"view({s[1]}, {s[0]})", (s[1], s[0]), {"contiguous": True}))
    if nd <= 2:
        options.append(("t()", tuple(reversed(s)), {}))
    if nd >= 2:
        d0, d1 = rng.sample(range(nd), 2)
        t = list(s)
        t[d0], t[d1] = t[d1], t[d0]
        options.append((f"transpose({d0}, {d1})", tuple(t), {}))
        options.append(("diagonal()", (*s[2:], min(s[0], s[1])), {}))
    i = rng.randrange(s[d])
    options.append((f"select({d}, {i})", s[:d] + s[d + 1 :], {"contiguous": x.contiguous and d == 0}))
    start = rng.randrange(s[d])
    length = rng.randint(1, s[d] - start)
    options.append(
        (f"narrow({d}, {start}, {length})", (*s[:d], length, *s[d + 1 :]), {"contiguous": x.contiguous and d == 0})
    )
    index = ", ".join([":"] * d + [f"{start}:{start + length}"])
    options.append((f"[{index}]", (*s[:d], length, *s[d + 1 :]), {"contiguous": x.contiguous and d == 0}))
    u = rng.randint(0, nd)
    options.append((f"unsqueeze({u})", (*s[:u], 1, *s[u:]), {"contiguous": x.contiguous}))
    options.append((f"expand(2, {', '.join(map(str, s))})", (2, *s), {"expanded": True}))
    ones = [k for k, n in enumerate(s) if n == 1]
    if ones:
        e = list(s)
        e[ones[0]] = 3
        options.append((f"expand({', '.join(map(str, e))})", tuple(e), {"expanded": True}))
    if rng.random() < 0.1:
        options.append((f"as_strided({x.name}.size(), {x.name}.stride(), {x.name}.storage_offset())", s, {}))
    elif rng.random() < 0.03:  # out of bounds: eager raises (issue 9, class 3 under no_grad)
        options.append(("as_strided((2, 1), (3, 0), 71)", (2, 1), {}))
    op, shape, kw = rng.choice(options)
    out = _view_of(st, x, shape, **kw)
    sep = "" if op.startswith("[") else "."
    if under_no_grad:
        out.guarded = True
        st.emit(f"with torch.no_grad():\n    {out.name} = {x.name}{sep}{op}", [x], [out], "view under no_grad")
    else:
        st.emit(f"{out.name} = {x.name}{sep}{op}", [x], [out], "view")
    return True


def _pieces(n: int, how: str, k: int) -> list[int]:
    if how == "chunk":
        size = -(-n // k)
        return [min(size, n - i) for i in range(0, n, size)]
    if how == "split":
        return [min(k, n - i) for i in range(0, n, k)]
    # tensor_split
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def _multi_view(st: _State) -> bool:
    rng = st.rng
    x = st.pick(lambda v: len(v.shape) >= 1 and max(v.shape) >= 2)
    if x is None:
        return False
    dims = [d for d, n in enumerate(x.shape) if 2 <= n <= 4] or [d for d, n in enumerate(x.shape) if n >= 2]
    d = rng.choice(dims)
    n = x.shape[d]
    how = rng.choice(["unbind", "split", "split_with_sizes", "chunk", "tensor_split"])
    if how == "unbind":
        sizes, call, drop = [1] * n, f"unbind({d})", True
    elif how == "split_with_sizes":
        cut = rng.randint(1, n - 1)
        sizes, call, drop = [cut, n - cut], f"split_with_sizes([{cut}, {n - cut}], {d})", False
    else:
        k = rng.randint(1, n) if how == "split" else rng.randint(2, n)
        sizes, call, drop = _pieces(n, how, k), f"{how}({k}, {d})", False
    if len(sizes) > 5:
        return False
    outs = []
    for size in sizes:
        shape = x.shape[:d] + x.shape[d + 1 :] if drop else (*x.shape[:d], size, *x.shape[d + 1 :])
        outs.append(_view_of(st, x, shape, contiguous=x.contiguous and d == 0, guarded=True))
    names = ", ".join(o.name for o in outs) + ("," if len(outs) == 1 else "")
    st.emit(f"{names} = {x.name}.{call}", [x], outs, "multi-output view")
    return True


def _mutation(st: _State) -> bool:
    rng = st.rng
    x = st.pick()
    if x is None:
        return False
    no_grad = (x.guarded and rng.random() < 0.9) or rng.random() < 0.2
    r = rng.random()
    uses = [x]
    if r < 0.2:
        y = st.pick(lambda v: v.shape == x.shape and v is not x, recent=False)
        if y is None:
            return False
        op = f"copy_({y.name})"
        uses.append(y)
    else:
        op = rng.choice(["add_(1.0)", "mul_(-1.0)", "mul_(2.0)", "zero_()", "sin_()"])
    code = f"{x.name}.{op}"
    if no_grad:
        code = f"with torch.no_grad():\n    {code}"
    st.emit(code, uses, (), "mutation under no_grad" if no_grad else "mutation")
    return True


def _metadata_mutation(st: _State) -> bool:
    rng = st.rng
    x = st.pick(lambda v: not v.is_input or rng.random() < 0.3)
    if x is None:
        return False
    s = x.shape
    options: list[tuple[str, tuple[int, ...]]] = [(f"unsqueeze_({len(s)})", (*s, 1))]
    if len(s) == 2:
        options.append(("t_()", (s[1], s[0])))
    if len(s) >= 2:
        t = list(s)
        t[0], t[-1] = t[-1], t[0]
        options.append((f"transpose_(0, {len(s) - 1})", tuple(t)))
    ones = [k for k, n in enumerate(s) if n == 1]
    if ones:
        options.append((f"squeeze_({ones[0]})", s[: ones[0]] + s[ones[0] + 1 :]))
    op, shape = rng.choice(options)
    x.shape = shape
    x.contiguous = x.contiguous and op.startswith(("unsqueeze", "squeeze"))
    st.emit(f"{x.name}.{op}", [x], (), "metadata mutation")
    return True


def _detach(st: _State) -> bool:
    x = st.pick()
    if x is None:
        return False
    out = _view_of(st, x, x.shape, grad=False, guarded=False, contiguous=x.contiguous)
    st.emit(f"{out.name} = {x.name}.detach()", [x], [out], "detach")
    if st.rng.random() < 0.6:
        st.emit(f"{out.name}.mul_(3.0)", [out], (), "mutation of detached")
    return True


def _random(st: _State) -> bool:
    rng = st.rng
    x = st.pick()
    if x is None:
        return False
    r = rng.random()
    if r < 0.25:
        out = _derived(st, x, x.shape, grad=False, contiguous=True)
        st.emit(f"{out.name} = torch.rand({_shape(x.shape)})", [], [out], "random")
        return True
    if r < 0.5:
        out = _derived(st, x, x.shape, contiguous=True)
        st.emit(f"{out.name} = F.dropout({x.name}, 0.5, True)", [x], [out], "random")
        return True
    y = st.pick(lambda v: not v.is_input and not v.expanded)
    if y is None:
        return False
    op = rng.choice(["uniform_()", "bernoulli_(0.5)", "normal_()"])
    code = f"{y.name}.{op}"
    if y.guarded:
        code = f"with torch.no_grad():\n    {code}"
    st.emit(code, [y], (), "random in-place")
    return True


def _custom(st: _State) -> bool:
    rng = st.rng
    kind = rng.choice(["ReturnsInput", "ScaledClone", "MarkDirty"])
    x = st.pick(lambda v: not v.is_input and not v.is_view and not v.expanded) if kind == "MarkDirty" else st.pick()
    if x is None:
        return False
    # ReturnsInput's output is a view of its input in eager (created in a custom Function: no in-place under grad).
    guarded = kind == "ReturnsInput" or (kind == "MarkDirty" and x.guarded)
    out = _derived(st, x, x.shape, guarded=guarded, expanded=x.expanded and kind != "ScaledClone")
    st.emit(f"{out.name} = {kind}.apply({x.name})", [x], [out], "custom Function")
    return True


def _alias_returning(st: _State) -> bool:
    rng = st.rng
    x = st.pick()
    if x is None:
        return False
    options = ["F.dropout({x}, 0.0, True)", "F.dropout({x}, 0.5, False)", "{x}.to(torch.float32)", "{x}.type_as({x})"]
    options += ["{x}.contiguous()"] if x.contiguous else []
    view_like = ["{x}.expand_as({x})", "{x}.reshape({x}.shape)"]
    op = rng.choice(options + view_like)
    out = _derived(st, x, x.shape, is_view=True, guarded=x.guarded, expanded=x.expanded)
    st.emit(f"{out.name} = {op.format(x=x.name)}", [x], [out], "alias-returning op")
    return True


MAKERS: list[tuple[Callable[[_State], bool], int]] = [
    (_pointwise, 6),
    (_single_view, 6),
    (lambda st: _single_view(st, under_no_grad=True), 1),
    (_multi_view, 5),
    (_mutation, 5),
    (_metadata_mutation, 2),
    (_detach, 1),
    (_random, 3),
    (_custom, 3),
    (_alias_returning, 3),
]


def generate(seed: int, index: int, dimensions: frozenset[str] = frozenset()) -> Program:
    """Program ``index`` of ``seed``: the classic generator, plus the new ``dimensions`` (Note [Fuzz dimensions])."""
    rng = random.Random(f"fuzz:{seed}:{index}")
    st = _State(rng)
    recipes = _inputs(rng, st)
    inputs = tuple(name for recipe in recipes for name in recipe.names)
    input_vars = [replace(v) for v in st.vars]
    # Most programs start by computing on an input (the views then are of intermediates, the common case).
    if rng.random() < 0.7:
        _pointwise(st)
    target = rng.randint(2, 9)
    tries = 0
    while len(st.body) < target and tries < 50:
        tries += 1
        maker = rng.choices([m for m, _ in MAKERS], [w for _, w in MAKERS])[0]
        maker(st)
    outputs = _outputs(st, inputs)
    program = Program(seed, index, inputs, _render_inputs(recipes), tuple(st.body), outputs)
    if dimensions & set(PROGRAM_DIMENSIONS):
        # Note [Fuzz dimensions]: a second stream, drawn only now, leaves the classic program as it was.
        extension = _Extension(random.Random(f"fuzz-dimensions:{seed}:{index}"), dimensions, recipes)
        program = extension.extend(program, [input_vars, *st.snapshots])
    settings = sorted(dimensions & set(STRATEGY_DIMENSIONS))
    if settings:  # one setting per program: each costs two more compiled strategies (stock and the backend)
        program = replace(program, settings=(random.Random(f"fuzz-settings:{seed}:{index}").choice(settings),))
    return program


def _outputs(st: _State, inputs: tuple[str, ...]) -> tuple[str, ...]:
    rng = st.rng
    defined = [v.name for v in st.vars if v.name not in inputs]
    pool = defined or list(inputs)
    k = min(len(pool), rng.choice([1, 2, 2, 3, 4]))
    # Mostly the most recent values (views at the end are the design's subject), sometimes any.
    outs = pool[-k:] if rng.random() < 0.6 else rng.sample(pool, k)
    if rng.random() < 0.15:
        outs.append(rng.choice(outs))  # a duplicated output
    if rng.random() < 0.15:
        outs.append(rng.choice(inputs))  # an input returned
    return tuple(outs)


# ---------------------------------------------------------------------------------------------------------
# The new dimensions (Note [Fuzz dimensions]).
# ---------------------------------------------------------------------------------------------------------

PROGRAM_DIMENSIONS = ("out", "inputs", "sizes", "grad_mode")
STRATEGY_DIMENSIONS = ("dynamic", "compiled_autograd")
DIMENSIONS = PROGRAM_DIMENSIONS + STRATEGY_DIMENSIONS
CALL_MODES = ("no_grad", "inference_mode")


def parse_dimensions(text: str) -> frozenset[str]:
    """``all``, ``classic`` (none: the generator and strategies of before), or a comma-separated list."""
    words = {w.strip() for w in text.split(",") if w.strip()}
    if words == {"all"}:
        return frozenset(DIMENSIONS)
    if words == {"classic"}:
        return frozenset()
    unknown = words - set(DIMENSIONS)
    if unknown or not words:
        raise ValueError(
            f"unknown fuzz dimensions {sorted(unknown) or text!r}: use all, classic or some of {', '.join(DIMENSIONS)}"
        )
    return frozenset(words)


def dimensions_text(dimensions: frozenset[str]) -> str:
    if dimensions == set(DIMENSIONS):
        return "all"
    return ",".join(d for d in DIMENSIONS if d in dimensions) or "classic"


def dimensions_tag(dimensions: frozenset[str]) -> str:
    """The program name's suffix: which program dimensions its generator drew (none for the classic one)."""
    drawn = [d for d in PROGRAM_DIMENSIONS if d in dimensions]
    return "all" if len(drawn) == len(PROGRAM_DIMENSIONS) else "+".join(drawn)


def call_mode_context(mode: str) -> Any:
    return contextlib.nullcontext() if not mode else getattr(torch, mode)()


UNARY_OUT = ("sin", "exp", "tanh", "neg", "abs", "sigmoid")
BINARY_OUT = ("add", "mul", "sub")
MULTI_OUT = ("max", "min", "sort")


def _computable(v: Var) -> bool:
    return v.exact and not v.integral


class _Extension:
    """Adds the new dimensions to a classic program: inputs, then statements inserted between the classic ones,
    then outputs, then (checked in eager) other sizes for the second and third call."""

    def __init__(self, rng: random.Random, dimensions: frozenset[str], recipes: list[_Recipe]) -> None:
        self.rng = rng
        self.dimensions = dimensions
        self.recipes = list(recipes)
        self.extra_vars: list[Var] = []
        self.call_mode = ""
        self.int_value: int | None = None
        self.list_vars: list[Var] = []

    def extend(self, classic: Program, snapshots: list[list[Var]]) -> Program:
        rng = self.rng
        if "grad_mode" in self.dimensions:
            self.call_mode = rng.choices(["", *CALL_MODES], [6, 2, 2])[0]
        makers: list[Callable[[_State], bool]] = []
        if "inputs" in self.dimensions:
            if rng.random() < 0.35:
                self.int_value = rng.randint(1, 3)
                self.recipes.append(_Recipe("int", (INT_PARAM,)))
                makers += [self._int_use] * rng.randint(1, 2)
            if rng.random() < 0.3:
                shape = tuple(rng.randint(1, 4) for _ in range(rng.choice([1, 2, 2])))
                grads = tuple(rng.random() < 0.6 for _ in range(rng.randint(2, 3)))
                self.recipes.append(_Recipe("list", ("xs",), shape, grads=grads))
                self.list_vars = [
                    Var(f"xs[{j}]", shape, is_input=True, grad=grad, guarded=grad) for j, grad in enumerate(grads)
                ]
                self.extra_vars += self.list_vars
                makers += [self._list_use] * rng.randint(1, 2)
            if rng.random() < 0.2:
                self.recipes.append(_Recipe("none", ("opt",)))
                makers.append(self._none_use)
        if "out" in self.dimensions:
            makers += [self._out_call] * rng.choices([0, 1, 2, 3], [3, 4, 2, 1])[0]
        rng.shuffle(makers)
        body, outputs = self._insert(classic, snapshots, makers)
        program = replace(
            classic,
            inputs=tuple(name for recipe in self.recipes for name in recipe.names),
            input_code=_render_inputs(self.recipes),
            body=body,
            outputs=outputs,
            params=((INT_PARAM, self.int_value),) if self.int_value is not None else (),
            call_mode=self.call_mode,
            tag=dimensions_tag(self.dimensions),
        )
        return self._other_sizes(program) if "sizes" in self.dimensions else program

    # Statements --------------------------------------------------------------------------------------------

    def _insert(
        self, classic: Program, snapshots: list[list[Var]], makers: list[Callable[[_State], bool]]
    ) -> tuple[tuple[Stmt, ...], tuple[str, ...]]:
        """Each maker's statement goes at a random place, seeing the variables live there (``snapshots[p]``:
        after the classic program's first ``p`` statements)."""
        rng = self.rng
        positions = sorted(rng.randint(0, len(classic.body)) for _ in makers)
        inserted: dict[int, list[Stmt]] = {}
        new_vars: list[Var] = []
        counter = 0
        for position, maker in zip(positions, makers):
            pool = [replace(v) for v in snapshots[position]] + self.extra_vars + new_vars
            st = _State(rng, vars=pool, counter=counter, prefix="u")
            if not maker(st) or not st.body:
                continue
            counter = st.counter
            inserted.setdefault(position, []).extend(st.body)
            new_vars += st.vars[len(pool) :]
        body: list[Stmt] = []
        for k in range(len(classic.body) + 1):
            body += inserted.get(k, [])
            body += classic.body[k : k + 1]
        outputs = list(classic.outputs)
        outputs += [v.name for v in new_vars if rng.random() < 0.5]
        return tuple(body), tuple(outputs)

    def _no_grad(self, code: str, uses: Sequence[Var]) -> str:
        """Under no_grad, mostly, where a tensor involved requires grad (else eager raises: a valid program too)."""
        if not self.call_mode and any(v.grad for v in uses) and self.rng.random() < 0.85:
            return "with torch.no_grad():\n    " + code.replace("\n", "\n    ")
        return code

    def _out_call(self, st: _State) -> bool:
        rng = st.rng
        x = st.pick(_computable)
        if x is None:
            return False
        if x.shape and rng.random() < 0.3:
            return self._multi_out_call(st, x)
        uses = [x]
        if rng.random() < 0.5:
            op = rng.choice(BINARY_OUT)
            y = st.pick(lambda v: _computable(v) and v.shape == x.shape, recent=False)
            args = f"{x.name}, {'2.0' if y is None else y.name}"
            uses += [] if y is None else [y]
        else:
            op = rng.choice(UNARY_OUT)
            args = x.name
        r = rng.random()
        target = None
        if r >= 0.35:  # into an input, or an intermediate
            into_input = r < 0.6
            target = st.pick(
                lambda v: _computable(v) and v.shape == x.shape and v.is_input == into_input and not v.expanded,
                recent=False,
            )
        if target is None:
            fresh = _derived(st, x, x.shape, grad=False, contiguous=True)
            maker = f"torch.empty_like({x.name})" if r < 0.2 or r >= 0.35 else "torch.empty(0)"
            code = self._no_grad(f"torch.{op}({args}, out={fresh.name})", uses)
            st.emit(f"{fresh.name} = {maker}\n{code}", uses, [fresh], "out= call")
        else:
            code = self._no_grad(f"torch.{op}({args}, out={target.name})", [*uses, target])
            st.emit(code, [*uses, target], (), "out= call into " + ("an input" if target.is_input else "a value"))
        return True

    def _multi_out_call(self, st: _State, x: Var) -> bool:
        rng = st.rng
        d = rng.randrange(len(x.shape))
        op = rng.choice(MULTI_OUT)
        shape = x.shape if op == "sort" else x.shape[:d] + x.shape[d + 1 :]
        target = None
        if rng.random() < 0.3:
            target = st.pick(lambda v: _computable(v) and v.shape == shape and not v.expanded, recent=False)
        values = target or _derived(st, x, shape, grad=False, contiguous=True)
        indices = _derived(st, x, shape, grad=False, contiguous=True, integral=True)
        uses = [x] + ([target] if target is not None else [])
        code = self._no_grad(f"torch.{op}({x.name}, {d}, out=({values.name}, {indices.name}))", uses)
        made = f"{indices.name} = torch.empty(0, dtype=torch.long)"
        if target is None:
            made = f"{values.name}, {indices.name} = torch.empty(0), torch.empty(0, dtype=torch.long)"
        defines = [indices] if target is not None else [values, indices]
        st.emit(f"{made}\n{code}", uses, defines, "multi-output out= call")
        return True

    def _int_use(self, st: _State) -> bool:
        rng = st.rng
        x = st.pick(_computable)
        if x is None:
            return False
        k = Var(INT_PARAM, ())
        options: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
            (f"{x.name}.mul({INT_PARAM})", x.shape, {"contiguous": x.contiguous and not x.expanded}),
            (f"{x.name}.add({INT_PARAM})", x.shape, {"contiguous": x.contiguous and not x.expanded}),
        ]
        if x.shape:
            d = rng.randrange(len(x.shape))
            options.append((f"{x.name}.roll({INT_PARAM}, {d})", x.shape, {"contiguous": True}))
            view = {"is_view": True, "guarded": x.guarded, "expanded": x.expanded, "contiguous": False}
            options.append((f"{x.name}[:{INT_PARAM}]", x.shape, {**view, "exact": False}))
            options.append((f"{x.name}.select(0, {INT_PARAM} % {x.name}.shape[0])", x.shape[1:], view))
        code, shape, kw = rng.choice(options)
        out = _derived(st, x, shape, **kw)
        st.emit(f"{out.name} = {code}", [x, k], [out], "int input")
        return True

    def _list_use(self, st: _State) -> bool:
        rng = st.rng
        xs = self.list_vars
        whole = Var("xs", ())
        shape = xs[0].shape
        grad = any(v.grad for v in xs)
        j = rng.randrange(len(xs))
        element = xs[j]
        r = rng.random()
        if r < 0.2:
            out = Var(st.fresh(), (len(xs), *shape), grad=grad)
            st.emit(f"{out.name} = torch.stack(xs)", [whole], [out], "list input")
        elif r < 0.35:
            out = Var(st.fresh(), (len(xs) * shape[0], *shape[1:]), grad=grad)
            st.emit(f"{out.name} = torch.cat(xs)", [whole], [out], "list input")
        elif r < 0.45:
            out = Var(st.fresh(), shape, grad=grad)
            st.emit(f"{out.name} = sum(xs)", [whole], [out], "list input")
        elif r < 0.65:
            out = _derived(st, element, shape)
            st.emit(f"{out.name} = {element.name}.{rng.choice(['sin()', 'mul(2.0)', 'exp()'])}", [element], [out])
        elif r < 0.85:
            out = _view_of(st, element, shape[1:], guarded=element.guarded)
            st.emit(f"{out.name} = {element.name}[0]", [element], [out], "view of a list input")
        else:
            code = f"{element.name}.mul_(2.0)"
            if element.grad and not self.call_mode and rng.random() < 0.9:
                code = f"with torch.no_grad():\n    {code}"
            st.emit(code, [element], (), "mutation of a list input")
        return True

    def _none_use(self, st: _State) -> bool:
        x = st.pick(_computable)
        if x is None:
            return False
        opt = Var("opt", ())
        if st.rng.random() < 0.5:
            out = _derived(st, x, x.shape)
            st.emit(f"{out.name} = {x.name}.add(1.0) if opt is None else {x.name}.add(opt)", [x, opt], [out], "None")
        else:  # returns x itself where opt is None
            out = _derived(st, x, x.shape, is_view=True, guarded=x.guarded, expanded=x.expanded)
            st.emit(f"{out.name} = {x.name} if opt is None else {x.name} * opt", [x, opt], [out], "None input")
        return True

    # Other sizes ---------------------------------------------------------------------------------------------

    def _other_sizes(self, program: Program) -> Program:
        """Two more calls: one dimension of one input grows or shrinks (and ``k`` changes), where eager's forward
        and backward run on each call; else only ``k`` changes, else nothing.

        Only programs whose first call runs in eager get more calls: a program whose compilation fails (AOTAutograd
        meets eager's backward error while tracing) compiles again on every call of every probe, and three calls
        of those tripled the fuzzer's time for errors already seen on the first call.
        """
        rng = self.rng
        if _eager_outcomes(program) != ["ran"]:
            return program
        candidates = [(r, d) for r, recipe in enumerate(self.recipes) for d in range(len(recipe.shape))]
        rng.shuffle(candidates)
        ks = rng.sample([v for v in range(1, 6) if v != self.int_value], 2) if self.int_value is not None else []
        int_only = [None] if self.int_value is not None else []
        for vary in [*candidates[:4], *int_only]:
            params = list(program.params)
            calls: list[list[int]] = [[], []]
            input_code = program.input_code
            if vary is not None:
                size = self.recipes[vary[0]].shape[vary[1]]
                sizes = rng.sample([v for v in range(max(2, size - 1), size + 5) if v != size], 2)
                params.insert(0, (SIZE_PARAM, size))
                calls = [[sizes[0]], [sizes[1]]]
                input_code = _render_inputs(self.recipes, vary)
            if self.int_value is not None:
                calls = [calls[0] + [ks[0]], calls[1] + [ks[1]]]
            candidate = replace(
                program, input_code=input_code, params=tuple(params), calls=tuple(tuple(c) for c in calls)
            )
            if all(outcome == "ran" for outcome in _eager_outcomes(candidate)):
                return candidate
        return program


def _eager_outcomes(program: Program) -> list[str]:
    """How each call ends in eager, its forward then a backward through every output that requires grad: "ran", or
    the exception's type and first line with digits blanked."""
    outcomes = []
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in program.cases():
            torch.manual_seed(0)
            try:
                args = case.inputs(torch.Generator().manual_seed(0), "cpu").args
                with call_mode_context(program.call_mode):
                    out = case.fn(*args)
                differentiable = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
                if differentiable:
                    torch.autograd.backward(differentiable, [torch.ones_like(t) for t in differentiable])
                outcomes.append("ran")
            except Exception as e:  # every outcome is compared
                first = str(e).splitlines()[0] if str(e) else ""
                outcomes.append(f"{type(e).__name__}: {re.sub(r'[0-9]+', '#', first)}")
            finally:
                torch.set_grad_enabled(True)
    return outcomes


# ---------------------------------------------------------------------------------------------------------
# Shrinking.
# ---------------------------------------------------------------------------------------------------------


def shrink(program: Program, fails: Callable[[Program], bool], max_tests: int = 60) -> tuple[Program, int]:
    """A smaller program on which ``fails`` still holds (delta debugging over outputs, then statements).

    ``fails(program)`` is assumed true. Returns the program and how many candidates were tried.
    """
    tried = 0

    def test(candidate: Program | None, current: Program) -> bool:
        nonlocal tried
        if candidate is None or candidate == current or tried >= max_tests:
            return False
        tried += 1
        return fails(candidate)

    current = _shrink_settings(_shrink_outputs(program, test), test)
    n = 2
    while len(current.body) >= 1 and tried < max_tests:
        size = len(current.body)
        chunks = [set(range(i, min(size, i + -(-size // n)))) for i in range(0, size, -(-size // n))]
        for chunk in chunks:
            candidate = current.without(chunk)
            if test(candidate, current):
                assert candidate is not None
                current = candidate
                n = max(n - 1, 2)
                break
        else:
            if n >= size:
                break
            n = min(size, 2 * n)
    return _shrink_outputs(current, test), tried


def _shrink_settings(program: Program, test: Callable[[Program | None, Program], bool]) -> Program:
    """Fewer calls, then the call's grad mode left as it is (Note [Fuzz dimensions]), where the failure stays."""
    current = program
    for candidate in (
        replace(current, calls=current.calls[:1]) if len(current.calls) > 1 else None,
        replace(current, calls=()) if current.calls else None,
    ):
        if candidate is not None and test(candidate, current):
            current = candidate
    if current.call_mode:
        candidate = replace(current, call_mode="")
        current = candidate if test(candidate, current) else current
    return current


def _shrink_outputs(program: Program, test: Callable[[Program | None, Program], bool]) -> Program:
    current = program
    k = 0
    while k < len(current.outputs) and len(current.outputs) > 1:
        candidate = replace(current, outputs=current.outputs[:k] + current.outputs[k + 1 :])
        if test(candidate, current):
            current = candidate
        else:
            k += 1
    return current
