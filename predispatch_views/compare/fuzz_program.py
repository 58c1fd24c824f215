"""Random programs for the differential fuzzer: a list of statements, printable as Python and executable.

A ``Program`` is an input recipe plus a body of ``Stmt`` (one or a few lines of source each, with the names they
define and use) and the names it returns. ``generate(seed, index)`` builds one from a ``random.Random`` seeded by
``(seed, index)`` alone, so a program is reproducible from those two numbers. The generator tracks each variable's
shape (and roughly its contiguity, and whether in-place ops on it raise in eager) so that most programs run in
eager; those that raise are valid too: the expected behaviour of a compiled strategy is then eager's error.

``Program.source()`` is a self-contained script (inputs and function), and ``Program.function()`` execs exactly that
source, so Dynamo traces real bytecode. ``shrink`` deletes outputs and statements (delta-debugging) while a
predicate still holds.
"""

from __future__ import annotations

import linecache
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

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

    @property
    def name(self) -> str:
        return f"fuzz_s{self.seed}_{self.index}"

    def source(self) -> str:
        lines = [HEADER, "", "def make_inputs(gen):"]
        lines += [f"    {line}" for line in self.input_code]
        lines += ["", "", f"def program({', '.join(self.inputs)}):"]
        for stmt in self.body:
            lines += [f"    {line}" for line in stmt.code.splitlines()]
        lines.append(f"    return ({''.join(o + ', ' for o in self.outputs).rstrip()})")
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
        make_inputs = self.namespace()["make_inputs"]

        def factory(gen: torch.Generator, device: str) -> Inputs:
            if device != "cpu":
                raise NotImplementedError("fuzz programs build their inputs on the CPU")
            args, leaves, extra = make_inputs(gen)
            return Inputs(tuple(args), tuple(leaves), tuple(extra))

        return Case(self.name, self.function(), factory)

    def without(self, drop: set[int]) -> Program | None:
        """The program minus statements ``drop`` and every statement or output that used what they defined."""
        defined = set(self.inputs)
        kept: list[Stmt] = []
        for k, stmt in enumerate(self.body):
            if k in drop or not set(stmt.uses) <= defined:
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


@dataclass
class _State:
    rng: random.Random
    vars: list[Var] = field(default_factory=list)
    body: list[Stmt] = field(default_factory=list)
    counter: int = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"t{self.counter - 1}"

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


def _shape(s: Sequence[int]) -> str:
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


def _inputs(rng: random.Random, st: _State) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Input recipes: leaves, non-leaf inputs, inputs without grad, and pairs of views of one base."""
    names: list[str] = []
    code: list[str] = []
    leaves: list[str] = []
    extra: list[str] = []
    letters = iter("abcdefgh")
    n = rng.choice([1, 1, 2, 2, 3])
    for _ in range(n):
        shape = tuple(rng.randint(1, 4) for _ in range(rng.choice([1, 2, 2, 3])))
        kind = rng.choices(["leaf", "nonleaf", "const", "aliased"], [4, 3, 2, 2])[0]
        if kind == "aliased":
            first, second = next(letters), next(letters)
            overlap = rng.random() < 0.5
            base_shape = (shape[0] + 1, *shape[1:]) if overlap else (2, *shape)
            code += [
                f"{first}_base = torch.randn({_shape(base_shape)}, generator=gen).requires_grad_()",
                f"{first}_source = {first}_base.mul(1)",
                f"{first}, {second} = "
                + (f"{first}_source[:-1], {first}_source[1:]" if overlap else f"{first}_source[0], {first}_source[1]"),
            ]
            leaves.append(f"{first}_base")
            extra.append(f"{first}_source")
            for name in (first, second):
                names.append(name)
                st.vars.append(Var(name, shape, contiguous=True, is_input=True, is_view=True))
            continue
        name = next(letters)
        names.append(name)
        if kind == "leaf":
            code.append(f"{name} = torch.randn({_shape(shape)}, generator=gen).requires_grad_()")
            leaves.append(name)
            st.vars.append(Var(name, shape, is_input=True, guarded=True))
        elif kind == "nonleaf":
            code += [
                f"{name}_base = torch.randn({_shape(shape)}, generator=gen).requires_grad_()",
                f"{name} = {name}_base.mul(1)",
            ]
            leaves.append(f"{name}_base")
            st.vars.append(Var(name, shape, is_input=True))
        else:
            code.append(f"{name} = torch.randn({_shape(shape)}, generator=gen)")
            st.vars.append(Var(name, shape, is_input=True, grad=False))
    tup = lambda xs: "(" + "".join(x + ", " for x in xs).rstrip() + ")"  # noqa: E731
    code.append(f"return {tup(names)}, {tup(leaves)}, {tup(extra)}")
    return tuple(names), tuple(code)


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


def generate(seed: int, index: int) -> Program:
    rng = random.Random(f"fuzz:{seed}:{index}")
    st = _State(rng)
    inputs, input_code = _inputs(rng, st)
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
    return Program(seed, index, inputs, input_code, tuple(st.body), outputs)


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

    current = _shrink_outputs(program, test)
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
