"""Note [Independent parts of the core] (slicing.py): a core computed from disjoint intermediates runs as one
compiled function per part, so a backward through some outputs reaches only the inputs eager's graph reaches.

Two kinds of checks: programs where a single compiled core differed from eager (a zero gradient where eager has
None, a second backward that raised), measured against eager under both entry points; and a property over
generated programs: running the parts one after the other computes what the whole core computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import predispatch_views as pv
from predispatch_views.capture import capture_function
from predispatch_views.compare.fuzz_program import ScaledClone, generate
from predispatch_views.pipeline import compile_captured
from tests.parity_utils import assert_same, flat_tensors, outcome, strict_compiled


def as_strided_between(a: torch.Tensor, b: torch.Tensor) -> Any:  # fuzzer s51_471, shrunk
    t1 = b @ b.t()
    t4 = t1.as_strided(t1.size(), t1.stride(), t1.storage_offset())  # Dynamo graph-breaks here; not a trace
    return t4, t4.split(4, 1)[0], a.sum(0), b


def no_grad_view_and_unrelated(b: torch.Tensor, d: torch.Tensor) -> Any:  # fuzzer s43_704, shrunk
    _, _, t3 = b.add(1.0).unbind(1)
    with torch.no_grad():
        t4 = t3.narrow(0, 0, 1)
    return t4.unsqueeze(1), d.cos()


def two_bases(x: torch.Tensor, w: torch.Tensor) -> Any:  # the library case: outputs that share only an input
    return (*x.sin().unbind(0), *(x @ w).chunk(2, dim=1))


def unrelated_input_write(c: torch.Tensor, e: torch.Tensor) -> Any:  # design/04's c.add_(1) example
    c.add_(1)
    return e.mul(2).unbind(0)


def clone_beside_a_custom_function(a: torch.Tensor, c: torch.Tensor) -> Any:  # fuzzer s1002_838, shrunk
    return a.clone(), ScaledClone.apply(c.mul(-0.5))[:, :, 1:2]


def draw_beside_a_custom_function(c: torch.Tensor, d: torch.Tensor) -> Any:  # fuzzer s1822_704, shrunk
    t0 = d.mul(-0.5)
    t0.bernoulli_(0.5)
    return t0, *ScaledClone.apply(c).unbind(0)  # views: the backend's graph is the prototype's, not stock's


def constants_beside_views(x: torch.Tensor) -> Any:  # mistral_sliding's cache positions, shrunk
    positions = torch.tensor([0, 1, 2])
    return *x.sin().unbind(0), torch.arange(3).view(3, 1), positions.unsqueeze(0)


class NoisyScale(torch.autograd.Function):
    """Its forward draws random numbers: its order among the program's draws is eager's."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rand_like(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


def _leaf(*shape: int) -> torch.Tensor:
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape).div(7).requires_grad_(True)


# name -> (program, inputs: fresh on every call, each a non-leaf of its own leaf unless the program needs a leaf)
PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[list[torch.Tensor], list[torch.Tensor]]]]] = {
    "as_strided_between": (
        as_strided_between,
        lambda: ([(a := _leaf(3, 1)).mul(1), b := _leaf(4, 2)], [a, b]),
    ),
    "no_grad_view_and_unrelated": (
        no_grad_view_and_unrelated,
        lambda: ([(b := _leaf(1, 3)).mul(1), (d := _leaf(4)).mul(1)], [b, d]),
    ),
    "two_bases": (two_bases, lambda: ([x := _leaf(2, 3), w := _leaf(3, 4)], [x, w])),
    # A custom Function is an opaque node of the core: it keeps its order, and the part it is in (Note [Independent
    # parts of the core]); before, it kept the whole core one compiled function.
    "clone_beside_a_custom_function": (
        clone_beside_a_custom_function,
        lambda: ([a := _leaf(3, 3), (c := _leaf(4, 1, 2)).mul(1)], [a, c]),
    ),
    # The capture watched ScaledClone's forward run: no draw, no write of an input, so the Function need not keep
    # its order against the bernoulli_; in one part with it, a backward through t0 freed that part's saved values
    # and the second backward, through the Function's output, raised where eager's runs.
    "draw_beside_a_custom_function": (
        draw_beside_a_custom_function,
        lambda: ([(c := _leaf(2)).mul(1), (d := _leaf(2, 2)).mul(1)], [c, d]),
    ),
    "constants_beside_views": (constants_beside_views, lambda: ([(x := _leaf(3, 2)).mul(1)], [x])),
    "unrelated_input_write": (
        unrelated_input_write,
        lambda: ([(c := _leaf(3)).mul(1), (e := _leaf(2, 3)).mul(1)], [c, e]),
    ),
}


def backward_per_output(fn: Callable[..., Any], make_inputs: Callable[[], Any]) -> list[Any]:
    """For each output that requires grad: the leaves' grads after a backward through it alone, then the outcome
    of a second backward through another output of the same call (eager keeps separate graphs apart)."""
    observed = []
    inputs, _ = make_inputs()
    count = len([o for o in flat_tensors(fn(*inputs)) if o.requires_grad])
    for i in range(count):
        inputs, leaves = make_inputs()
        outs = [o for o in flat_tensors(fn(*inputs)) if o.requires_grad]
        outs[i].sum().backward()
        first = [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]
        other = outs[(i + 1) % count]
        second = outcome(lambda other=other: other.sum().backward())
        observed.append((first, second[0], [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]))
    return observed


@pytest.mark.parametrize("entry", ["backend", "backend_dynamic", "compile_function"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_backward_through_some_outputs_reaches_what_eager_reaches(name: str, entry: str) -> None:
    """``backend_dynamic``: symbolic sizes, whose size inputs once kept the core whole (fuzzer s1312_567)."""
    fn, make_inputs = PROGRAMS[name]
    pv.FALLBACKS.clear()
    if entry.startswith("backend"):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=pv.backend("aot_eager"), dynamic=entry == "backend_dynamic")
    else:
        compiled = pv.compile_function(fn, inner="aot_eager")
    expected = backward_per_output(fn, make_inputs)
    actual = backward_per_output(compiled, make_inputs)
    assert [r for _, r in pv.FALLBACKS] == []
    assert_same(actual, expected)


def test_outputs_sharing_an_intermediate_stay_one_part() -> None:
    def shared(x: torch.Tensor, w: torch.Tensor) -> Any:
        y = x @ w
        return (*y.sin().unbind(0), *y.cos().unbind(1))

    assert [len(p.inputs) for p in _sliced(shared, [_leaf(2, 3), _leaf(3, 4)]).parts] == [2]


def test_random_ops_keep_their_order_in_one_part() -> None:
    """Without the rule the parts would be {r1, r3} then {r2}: r3 would draw before r2, unlike eager."""

    def draws(x: torch.Tensor, y: torch.Tensor) -> Any:
        r1 = F.dropout(x, 0.5)
        r2 = F.dropout(y, 0.5)
        r3 = F.dropout(r1 * 2, 0.5)
        return (*r1.unbind(0), *r2.unbind(0), *r3.unbind(0))

    make = lambda: [_leaf(3, 4).mul(1), _leaf(3, 4).mul(1)]  # noqa: E731
    assert len(_sliced(draws, make()).parts) == 1
    torch.manual_seed(0)
    expected = draws(*make())
    torch.manual_seed(0)
    actual = pv.compile_function(draws, inner="aot_eager")(*make())
    assert_same([o.detach() for o in actual], [o.detach() for o in expected])


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_custom_function_that_draws_keeps_its_place_among_the_draws(entry: str) -> None:
    """Note [Independent parts of the core]: the capture watched NoisyScale's forward draw random numbers, so the
    Function stays ordered, in the part of the draws around it, and draws between them as in eager. Taken for
    effect-free, it would be a part of its own, run after the other part's two draws: other values."""

    def program(c: torch.Tensor, d: torch.Tensor) -> Any:
        t0 = d.mul(-0.5)
        t0.bernoulli_(0.5)
        t1 = NoisyScale.apply(c)
        return t0 + torch.rand_like(t0), *t1.unbind(0)

    make = lambda: [_leaf(2).mul(1), _leaf(2, 2).mul(1)]  # noqa: E731
    compiled = strict_compiled(program, entry)
    torch.manual_seed(0)
    expected = program(*make())
    torch.manual_seed(0)
    actual = compiled(*make())
    assert_same([o.detach() for o in actual], [o.detach() for o in expected])
    assert not pv.FALLBACKS, list(pv.FALLBACKS)


def test_a_written_input_keeps_its_later_readers_and_its_aliases_later_readers_in_its_part() -> None:
    """A read of a written input's alias before the write may be a part of its own, run before the writes' part;
    a read after it stays in the writes' part (Note [Independent parts of the core])."""

    def write_then_read_alias(c: torch.Tensor, d: torch.Tensor, e: torch.Tensor) -> Any:
        s = d.sin()  # reads d before c's write (d aliases c)
        c.mul_(2)
        return (*s.unbind(0), *d.cos().unbind(0), *e.exp().unbind(0))

    def make() -> list[torch.Tensor]:
        base = torch.arange(8.0).div(7).requires_grad_().mul(1)
        return [base[:4], base[2:6], torch.arange(6.0).reshape(2, 3)]

    parts = _sliced(write_then_read_alias, make()).parts
    assert [p.inputs for p in parts] == [(1,), (0, 1), (2,)]
    expected = write_then_read_alias(*make())
    actual = pv.compile_function(write_then_read_alias, inner="aot_eager")(*make())
    assert_same(list(actual), list(expected))


def _sliced(fn: Callable[..., Any], inputs: list[torch.Tensor]) -> Any:
    graph, _ = capture_function(lambda *a: list(fn(*a)), inputs)
    program = compile_captured(graph, inputs, "eager", compile_core=False, stock_fallback=False)
    assert program.sliced is not None, program.fallback_reason
    return program.sliced


PROPERTY_SEED, PROPERTY_PROGRAMS = 61, 240


def test_the_parts_compute_what_the_whole_core_computes() -> None:
    """Over generated programs: the parts, run one after the other on fresh inputs, return the core's outputs and
    leave the inputs as the core leaves them (a part that reads a written input before its write runs before the
    writes' part); no intermediate is in two parts. Some programs must split, or the property says nothing."""
    split = compared = 0
    for i in range(PROPERTY_PROGRAMS):
        case = generate(PROPERTY_SEED, i).case()

        def fresh(case: Any = case) -> list[Any]:
            return list(case.inputs(torch.Generator().manual_seed(0), "cpu").args)

        try:
            inputs = fresh()
            graph, _ = capture_function(lambda *a, fn=case.fn: flat_tensors(fn(*a)), inputs)
            program = compile_captured(graph, inputs, "eager", compile_core=False, stock_fallback=False)
        except Exception:  # eager's own errors, or what the tracer refuses: not this property's business
            continue
        if program.sliced is None or len(program.sliced.parts) < 2:
            continue
        split += 1
        parts = program.sliced.parts
        members = [{n.name for n in p.graph.graph.nodes if n.op not in ("placeholder", "output")} for p in parts]
        grad_mode = {n.name for n in program.sliced.core.graph.nodes if "set_grad_enabled" in str(n.target)}
        for j, a in enumerate(members):
            for b in members[j + 1 :]:
                assert a & b <= grad_mode, (case.name, a & b)
        whole = _run_on(program.sliced.core, fresh)
        pieces = _run_on(lambda *a, parts=parts: _run_parts(parts, a), fresh)
        if whole[0] == "raised":
            continue  # the core alone, uncompiled, writes a leaf or similar: the compiled pipeline decides
        compared += 1
        assert_same(pieces, whole)
    print(f"{split} programs split, {compared} compared")
    assert split >= 20 and compared >= 20, (split, compared)


def _run_parts(parts: Any, args: tuple[Any, ...]) -> list[Any]:
    outputs: dict[int, Any] = {}
    for p in parts:
        for k, value in zip(p.outputs, p.graph(*(args[i] for i in p.inputs))):
            outputs[k] = value
    return [outputs[k] for k in sorted(outputs)]


def _run_on(run: Callable[..., Any], fresh: Callable[[], list[Any]]) -> Any:
    inputs = fresh()
    torch.manual_seed(0)
    with torch.no_grad():
        result = outcome(lambda: [t.clone() for t in run(*inputs)])
    if result[0] == "raised":
        return ("raised",)
    return result[1], [t.detach().clone() for t in inputs if isinstance(t, torch.Tensor)], torch.rand(2)


def test_explain_shows_each_part() -> None:
    from predispatch_views.explain import explain

    e = explain(two_bases, _leaf(2, 3), _leaf(3, 4))
    sections = e.sections()
    parts = [title for title in sections if title.startswith("core part")]
    assert parts == ["core part 0 (inputs 0; core outputs 0)", "core part 1 (inputs 0, 1; core outputs 1)"]
    assert "aten.matmul" in sections[parts[1]] and "aten.matmul" not in sections[parts[0]]
    assert "core0 = _core0(args[0], )" in e.epilogue_source


@pytest.mark.parametrize(("toggles", "parts"), [((False, True), 2), ((False,), 1), ((True, False, True), 1)])
def test_a_core_that_ends_in_another_grad_mode_stays_whole(toggles: tuple[bool, ...], parts: int) -> None:
    """Each part replays every grad mode change; a core that does not end in the mode it began in would leave the
    next part starting in the wrong one."""
    from torch import fx

    from predispatch_views import _torch_internals as ti
    from predispatch_views.slicing import split_core

    graph = fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    for p in (x, y):
        p.meta["val"] = torch.empty(2)
    for mode in toggles:
        graph.call_function(ti.SET_GRAD_ENABLED, (mode,))
    graph.output(
        (graph.call_function(torch.ops.aten.sin.default, (x,)), graph.call_function(torch.ops.aten.cos.default, (y,)))
    )
    assert len(split_core(fx.GraphModule(torch.nn.Module(), graph), [0, 1])) == parts


def test_a_part_with_no_input_and_no_grad_joins_another() -> None:
    """Note [Independent parts of the core], its last paragraph: constants made on each call have no autograd node
    to keep apart; as parts of their own they cost a compiled function call each (mistral_sliding had two)."""
    assert len(_sliced(constants_beside_views, [_leaf(3, 2).mul(1)]).parts) == 1

    def constants_only(x: torch.Tensor) -> Any:
        return torch.arange(4).view(2, 2), torch.tensor([1.0, 2.0]).unsqueeze(1), x.cos().unbind(0)[0]

    assert len(_sliced(constants_only, [_leaf(2, 2).mul(1)]).parts) == 1

    def a_draw(x: torch.Tensor) -> Any:  # a draw keeps its own order: not inert
        return torch.rand(3).view(3, 1), *x.sin().unbind(0)

    assert len(_sliced(a_draw, [_leaf(3, 2).mul(1)]).parts) == 2


def test_the_core_stays_whole_where_no_backward_can_follow() -> None:
    """Parts only change what a backward reaches, and each costs a compiled function call."""
    x, w = _leaf(2, 3), _leaf(3, 4)
    assert len(_sliced(two_bases, [x, w]).parts) == 2
    assert len(_sliced(two_bases, [x.detach(), w.detach()]).parts) == 1
    with torch.no_grad():
        assert len(_sliced(two_bases, [x, w]).parts) == 1
