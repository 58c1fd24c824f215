"""Note [A write to a value a backward saved]: a write to a value an earlier node saved for backward. Eager's
forward runs and its backward raises only where it reaches that node; stock's compile raises for every call (the
joint trace meets the error), and the prototype used to run such graphs uncompiled. The run from the first node
that touches the storage through the last write now runs in eager between compiled segments: the backward raises
eager's error, message and version numbers included, exactly where eager's does, and runs where eager's runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views as pv
from predispatch_views.outcomes import GRAPHS
from tests.parity_utils import outcome


def result_written_after_save(a: torch.Tensor, b: torch.Tensor) -> Any:
    t0 = a.exp()  # exp's backward reads its result
    t0.uniform_()
    y = b.sin()
    return (*t0.unbind(0), y)


def input_written_under_no_grad(a: torch.Tensor, b: torch.Tensor) -> Any:
    t = a @ a.t()  # mm saves a
    with torch.no_grad():
        a.t()[:, 0:1].sin_()
    return (t, *(b * 2).unbind(0))


def intermediate_written_by_out(a: torch.Tensor, b: torch.Tensor) -> Any:
    t1 = b.sum(1, keepdim=True).expand(3, 3).contiguous()
    t3 = t1.sin()  # saves t1, made by the compiled segment's sum... in eager, "output 0 of Clone"
    with torch.no_grad():
        torch.add(t3, a, out=t1)
    return (t1, t3, *t3.cos().unbind(0))


def two_storages(a: torch.Tensor, b: torch.Tensor) -> Any:
    t0 = a.sigmoid()
    u = b.mul(a)  # saves a and b
    with torch.no_grad():
        b.mul_(-1.0)
        t0.mul_(2.0)
    return (t0, t0.mul(-0.5), u, *a.unbind(0))


def metadata_write_of_a_saved_input(a: torch.Tensor, b: torch.Tensor) -> Any:
    t0 = a @ a.t()
    t3 = a.narrow(1, 0, 1)
    t3.unsqueeze_(2)  # bumps the version of a's storage
    return (t0, *b.sin().unbind(0))


PROGRAMS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (
        result_written_after_save,
        input_written_under_no_grad,
        intermediate_written_by_out,
        two_storages,
        metadata_write_of_a_saved_input,
    )
}


def fresh_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(3, 3, requires_grad=True).mul(1), torch.randn(3, 3, requires_grad=True).mul(1)


def run(fn: Callable[..., Any], which: int | None) -> dict[str, Any]:
    """Forward values, then a backward through output ``which`` (None: every output requiring grad)."""
    gen = torch.Generator().manual_seed(0)
    a_leaf = torch.randn(3, 3, generator=gen, requires_grad=True)
    b_leaf = torch.randn(3, 3, generator=gen, requires_grad=True)
    a, b = a_leaf.mul(1), b_leaf.mul(1)
    torch.manual_seed(0)  # uniform_ draws
    result = outcome(lambda: fn(a, b))
    if result[0] != "ok":
        return {"forward": result}
    outs = [o for o in result[1] if o.requires_grad]
    chosen = outs if which is None else outs[which : which + 1]
    seen: dict[str, Any] = {
        "values": [o.detach().clone() for o in result[1]],
        "requires_grad": [o.requires_grad for o in result[1]],
        "backward": outcome(lambda: torch.autograd.backward(chosen, [torch.ones_like(o) for o in chosen])),
    }
    seen["grads"] = [None if t.grad is None else t.grad.clone() for t in (a_leaf, b_leaf)]
    return seen


def assert_same_run(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual.keys() == expected.keys()
    if "forward" in expected:
        assert actual["forward"][:2] == expected["forward"][:2]
        return
    assert actual["requires_grad"] == expected["requires_grad"]
    assert actual["backward"] == expected["backward"]  # eager's message: node name and versions
    torch.testing.assert_close(actual["values"], expected["values"])
    torch.testing.assert_close(actual["grads"], expected["grads"])


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_backward_raises_or_runs_as_eager(name: str) -> None:
    program = PROGRAMS[name]
    outputs = len([o for o in program(*fresh_inputs()) if o.requires_grad])
    torch._dynamo.reset()
    stock = run(torch.compile(program, backend="aot_eager"), None)
    assert "forward" in stock  # the premise: stock's compile raises eager's backward error in forward
    eager_raised = []
    for which in [None, *range(outputs)]:
        expected = run(program, which)
        eager_raised.append(expected.get("backward", ("ok",))[0] == "raised")
        for compiled in (
            torch.compile(program, backend=pv.backend("aot_eager", strict=True)),
            pv.compile_function(program, inner="aot_eager", strict=True),
        ):
            torch._dynamo.reset()
            assert_same_run(run(compiled, which), expected)
    assert any(eager_raised) and not all(eager_raised)  # both kinds of backward are exercised


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_program_is_compiled_in_segments(name: str) -> None:
    program = PROGRAMS[name]
    torch._dynamo.reset()
    GRAPHS.clear()
    torch.compile(program, backend=pv.backend("aot_eager", strict=True))(*fresh_inputs())
    assert [outcome for _, outcome, _ in GRAPHS] == ["replayed"]
    explained = pv.explain(program, *fresh_inputs())
    assert explained.program.segments
    assert " through " in str(explained)  # the run in eager, named from its first node through its last write


def write_after_an_unused_saver(x: torch.Tensor) -> Any:
    y = x.mul(2)
    unused = y.sin()  # noqa: F841  sin saves y, but no gradient ever reaches its node
    a, b = y.split(2)
    with torch.no_grad():
        y.mul_(3)  # replayed after the views
    return a, b


def input_write_after_an_unused_saver(x: torch.Tensor) -> Any:
    unused = x.sin()  # noqa: F841
    t = x.expand(2, *x.shape)
    t.unsqueeze_(3)  # a metadata write of x's view: bumps x's version
    return (t,)


@pytest.mark.parametrize("entry", ["backend", "backend_dynamic", "compile_function"])
@pytest.mark.parametrize("fn", [write_after_an_unused_saver, input_write_after_an_unused_saver])
def test_a_saver_nothing_observes_saves_nothing_that_counts(fn: Callable[..., Any], entry: str) -> None:
    """fallback_rules.may_save: an unused ``sin`` made the write after the views fall back ("sin of the compiled
    region may save it", fuzzer s1826_1203). Eager's node is never reached by a backward, and AOTAutograd drops the
    node: the program is replayed with no fallback (strict) and matches eager."""
    from tests.parity_utils import assert_matches_eager, strict_compiled

    def make_inputs() -> list[torch.Tensor]:
        torch.manual_seed(0)
        return [torch.randn(4, 3, requires_grad=True).mul(1)]

    if entry == "backend_dynamic":
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend=pv.backend("aot_eager", strict=True), dynamic=True)
    else:
        compiled = strict_compiled(fn, entry)
    assert_matches_eager(fn, compiled, make_inputs)
