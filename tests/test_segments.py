"""Segments (issue 22; Note [Segments] in segments.py): a program whose epilogue cannot move a mutation after the
whole core is cut in two there instead of falling back. Each program below fell back before; each now runs with no
fallback (strict), in several segments, matching eager on every probe (values, aliasing, view nodes, gradients,
in-place writes to the outputs and eager's errors), under the backend (static and dynamic) and compile_function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import predispatch_views
import predispatch_views as pv
from predispatch_views import pipeline
from predispatch_views.compare.fuzz_program import MarkDirty, ReturnsInput, ScaledClone
from predispatch_views.fallbacks import FallbackKind
from tests.parity_utils import assert_matches_eager, assert_same, strict_compiled, view_nodes


class ReturnsItsInput(torch.autograd.Function):
    """Eager returns a view of the input whose grad_fn is this Function's backward (which halves the gradient)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 0.5


def read_after_a_write_through_a_view(x: torch.Tensor) -> Any:
    y = x * 2
    v = y[:2]
    v.mul_(3)  # replayed in eager: a write through a view
    return v, y.sin()  # compiled code that reads y after it


def read_of_an_alias_taken_before_the_write(x: torch.Tensor) -> Any:
    y = x.exp()
    row = y[1]
    head, tail = y.split(2)
    y[0].add_(1)  # a write through a view after the split: replayed
    return head, tail, row.cos()  # row was taken before the write, and is read after it


def view_of_the_written_value_read_by_compiled_code(x: torch.Tensor) -> Any:
    y = x.mul(2)
    v = y[:, :2]
    v.mul_(2)
    flat = v.reshape(-1)
    return v, flat.tanh(), *y.unbind(0)


def random_in_place_op_after_the_views_then_read(x: torch.Tensor) -> Any:
    y = x.sin()
    a, b = y.chunk(2)
    y[0].bernoulli_(0.5)  # eager's lazy error on a and b: the program raises it where eager does
    return a, b, y * 2


def random_in_place_op_on_a_fresh_tensor_after_the_views(x: torch.Tensor) -> Any:
    y = x.cos()
    outs = y.unbind(0)
    noise = torch.zeros_like(x)
    tail = noise[2:]
    noise[0].uniform_()  # after a view the program returns: replayed, and read by the compiled code below
    return *outs, tail, noise.mul(x).sum(0)


def write_to_a_base_a_later_op_saves(x: torch.Tensor) -> Any:
    y = x * 3
    head, tail = y.split(2)
    with torch.no_grad():
        y.mul_(2)  # after the views, under no_grad: replayed
    return head, tail, y.tanh()  # tanh saves its result, computed after the write


def two_cuts(x: torch.Tensor) -> Any:
    y = x * 2
    v = y[:2]
    v.mul_(3)
    z = y.sin()
    w = z[1:]
    w.add_(1)
    return v, w, z.cos()


# Note [A write through a view of a base the epilogue views]: the program is cut before the write, whose base
# then reaches the next segment as an input.
def write_through_a_full_view_of_a_viewed_base(x: torch.Tensor) -> Any:
    y = x.mul(2.0)
    y.unsqueeze(0).mul_(3.0)  # recorded: eager's y has CopySlices as its grad_fn
    return y.split(2)


def hidden_write_through_a_full_view_of_a_viewed_base(x: torch.Tensor) -> Any:
    y = x.add(1.0)
    y.detach().mul_(3.0)  # hidden from autograd; no node saved a value of y's storage
    return y.unbind(0)


def no_grad_write_of_a_base_returned_and_viewed(x: torch.Tensor) -> Any:
    y = x.add(1.0)
    with torch.no_grad():
        y.view(-1).zero_()
    return y, *y.split(2)


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    f.__name__: (f, lambda: [torch.randn(4, 3, requires_grad=True)])
    for f in (
        read_after_a_write_through_a_view,
        read_of_an_alias_taken_before_the_write,
        view_of_the_written_value_read_by_compiled_code,
        random_in_place_op_after_the_views_then_read,
        random_in_place_op_on_a_fresh_tensor_after_the_views,
        write_to_a_base_a_later_op_saves,
        two_cuts,
        write_through_a_full_view_of_a_viewed_base,
        hidden_write_through_a_full_view_of_a_viewed_base,
        no_grad_write_of_a_base_returned_and_viewed,
    )
}
ENTRIES = ["backend", "backend_dynamic", "compile_function"]


def _seeded(make_inputs: Callable[[], list[torch.Tensor]]) -> Callable[[], list[torch.Tensor]]:
    def make() -> list[torch.Tensor]:
        torch.manual_seed(0)
        return make_inputs()

    return make


def _compiled(fn: Callable[..., Any], entry: str) -> Callable[..., Any]:
    if entry == "compile_function":
        return predispatch_views.compile_function(fn, inner="aot_eager", strict=True)
    return torch.compile(
        fn, backend=predispatch_views.backend("aot_eager", strict=True), dynamic=entry == "backend_dynamic"
    )


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_program_cut_into_segments_matches_eager(name: str, entry: str) -> None:
    fn, make_inputs = PROGRAMS[name]
    torch._dynamo.reset()
    pipeline.GRAPHS.clear()
    assert_matches_eager(fn, _compiled(fn, entry), _seeded(make_inputs))
    if entry != "compile_function":
        outcomes = {(outcome, detail.split(", in ")[-1]) for _, outcome, detail in pipeline.GRAPHS}
        assert any(outcome == "replayed" and detail.endswith("segments") for outcome, detail in outcomes), outcomes


ORDERING_KINDS = (
    FallbackKind.READ_AFTER_UNRECOMPUTABLE_MUTATION,
    FallbackKind.READ_OF_ALIAS_TAKEN_BEFORE_MUTATION,
    FallbackKind.CORE_READS_REPLAYED_MUTATION,
    FallbackKind.REPLAYED_COPY_BEFORE_CORE_WRITE,
    FallbackKind.RANDOM_MUTATION_AFTER_VIEWS,
    FallbackKind.WRITE_TO_A_BASE_THE_CORE_MAY_SAVE,
    FallbackKind.CORE_WRITES_THROUGH_A_VIEW,
)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_without_cuts_the_program_falls_back(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The programs above are cases of the ordering rules: with cutting off, each falls back with one of their kinds.
    fn, make_inputs = PROGRAMS[name]
    monkeypatch.setattr(pipeline, "MAX_CUT_DEPTH", 0)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="StrictModeError") as info:
        torch.compile(fn, backend=predispatch_views.backend("aot_eager", strict=True))(*_seeded(make_inputs)())
    assert any(kind.value.marker in str(info.value) for kind in ORDERING_KINDS), str(info.value)


def test_two_mutations_give_three_segments() -> None:
    fn, make_inputs = PROGRAMS["two_cuts"]
    torch._dynamo.reset()
    pipeline.GRAPHS.clear()
    torch.compile(fn, backend=predispatch_views.backend("aot_eager", strict=True))(*make_inputs())
    (entry,) = pipeline.GRAPHS
    assert entry[1] == "replayed" and entry[2].endswith("in 3 segments"), entry


def writes_a_crossing_value_after_the_cut(x: torch.Tensor) -> Any:
    y = x * 2
    v = y[:2]
    v.mul_(3)
    z = y.sin()
    y.add_(1)  # the second half would write its own input y, a view's base: no cut
    return v, z


def test_a_cut_the_second_half_would_write_across_is_refused() -> None:
    torch._dynamo.reset()
    with pytest.raises(Exception, match="mutated its base"):
        torch.compile(
            writes_a_crossing_value_after_the_cut, backend=predispatch_views.backend("aot_eager", strict=True)
        )(torch.randn(4, 3, requires_grad=True))


def random_write_last(x: torch.Tensor) -> Any:
    y = x.sin()
    a, b = y.split(2)
    c = y[3]
    c.uniform_()  # the last op: replayed after the whole core, it draws where eager draws
    return a.detach(), b.detach(), c


def test_a_random_write_after_every_compiled_op_needs_no_cut() -> None:
    torch._dynamo.reset()
    pipeline.GRAPHS.clear()
    make = _seeded(lambda: [torch.randn(4, 3, requires_grad=True)])
    compiled = torch.compile(random_write_last, backend=predispatch_views.backend("aot_eager", strict=True))
    assert_matches_eager(random_write_last, compiled, make)
    assert all(not detail.endswith("segments") for _, _, detail in pipeline.GRAPHS), list(pipeline.GRAPHS)


def test_explain_shows_each_segment() -> None:
    text = str(predispatch_views.explain(read_after_a_write_through_a_view, torch.randn(4, 3, requires_grad=True)))
    assert "cut into 2 segments" in text and "cut after mul_" in text
    assert "segment 0: core graph" in text and "segment 1: epilogue source" in text
    assert "fallback reasons ==\nnone" in text


def function_returning_its_input_then_unbind(x: torch.Tensor) -> Any:
    return ReturnsItsInput.apply(x.mul(2)).unbind(0)


def function_returning_its_input_between_compiled_code(x: torch.Tensor) -> Any:
    y = x.sin()
    t = ReturnsItsInput.apply(y)
    return t, t.view(-1).unbind(0)[0].cos(), y * 2, t.exp()


def function_returning_its_input_first(x: torch.Tensor) -> Any:
    t = ReturnsItsInput.apply(x)
    return t.mul(3).split(1)


@pytest.mark.parametrize(
    "fn",
    [
        function_returning_its_input_then_unbind,
        function_returning_its_input_between_compiled_code,
        function_returning_its_input_first,
    ],
    ids=lambda f: f.__name__,
)
def test_compile_function_runs_a_function_returning_its_input_between_segments(fn: Callable[..., Any]) -> None:
    # It ran eagerly before (eager's output is a view of the input with the Function's backward, which AOTAutograd
    # cannot produce); now the call runs in eager between two compiled segments: strict, every probe eager's.
    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    compiled = predispatch_views.compile_function(fn, inner="aot_eager", strict=True)
    assert_matches_eager(fn, compiled, make_inputs)
    outs = compiled(*make_inputs())
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    expected = fn(*make_inputs())
    assert view_nodes(outs) == view_nodes([expected] if isinstance(expected, torch.Tensor) else list(expected))
    with pytest.raises(pipeline.StrictModeError, match="returns an input"):
        original = pipeline.MAX_CUT_DEPTH
        pipeline.MAX_CUT_DEPTH = 0
        try:
            predispatch_views.compile_function(fn, inner="aot_eager", strict=True)(*make_inputs())
        finally:
            pipeline.MAX_CUT_DEPTH = original


def transposes_its_input_then_unbinds(x: torch.Tensor) -> Any:
    x.t_()
    return x.mul(2).unbind(0)


def views_then_squeezes_its_input(x: torch.Tensor, w: torch.Tensor) -> Any:
    heads = (w * 3).chunk(2)
    x.squeeze_(0)
    return (*heads, *(x @ w).unbind(1))


@pytest.mark.parametrize(
    "fn", [transposes_its_input_then_unbinds, views_then_squeezes_its_input], ids=lambda f: f.__name__
)
def test_compile_function_runs_an_input_metadata_mutation_between_segments(fn: Callable[..., Any]) -> None:
    # It ran eagerly before (AOTAutograd applies an input's metadata after the region, without eager's version
    # bumps); now the call runs in eager between compiled segments, as at Dynamo's graph break: strict, every probe
    # eager's, and the input ends with eager's metadata and version.
    def make_inputs() -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(1, 3, 3, generator=gen, requires_grad=True).mul(1)  # a non-leaf: writable in place
        return [x[0] if fn is transposes_its_input_then_unbinds else x, torch.randn(3, 3, generator=gen)]

    n_args = fn.__code__.co_argcount
    compiled = predispatch_views.compile_function(fn, inner="aot_eager", strict=True)
    assert_matches_eager(fn, compiled, lambda: make_inputs()[:n_args])
    ins_c, ins_e = make_inputs()[:n_args], make_inputs()[:n_args]
    compiled(*ins_c), fn(*ins_e)
    assert [(t.shape, t.stride(), t._version) for t in ins_c] == [(t.shape, t.stride(), t._version) for t in ins_e]
    with pytest.raises(pipeline.StrictModeError, match="metadata mutation"):
        original = pipeline.MAX_CUT_DEPTH
        pipeline.MAX_CUT_DEPTH = 0
        try:
            predispatch_views.compile_function(fn, inner="aot_eager", strict=True)(*make_inputs()[:n_args])
        finally:
            pipeline.MAX_CUT_DEPTH = original


def test_segments_under_the_flag_with_inductor() -> None:
    # The flag's default inner backend compiles each segment; the program still matches eager, in 3 segments.
    fn, make_inputs = PROGRAMS["two_cuts"]
    torch._dynamo.reset()
    pipeline.GRAPHS.clear()
    with predispatch_views.enable():
        assert_matches_eager(fn, torch.compile(fn), _seeded(make_inputs))
    assert any(detail.endswith("in 3 segments") for _, _, detail in pipeline.GRAPHS), list(pipeline.GRAPHS)
    torch._dynamo.reset()


# Fuzz programs (seed 703, every dimension) that fell back on an ordering rule on dbdc8cb, where a later segment
# writes a value an earlier one handed over: each now matches eager under every prototype setting, no fallback.
SEED_703_CUT = [15, 39, 64, 75]


@pytest.mark.parametrize("index", SEED_703_CUT)
def test_fuzz_programs_that_cut_and_match_eager(index: int) -> None:
    from predispatch_views.compare.fuzz import fuzz, fuzz_strategies
    from predispatch_views.compare.fuzz_program import parse_dimensions

    dimensions = parse_dimensions("all")
    strategies = fuzz_strategies("aot_eager", dimensions)
    results = fuzz(1, 703, strategies, do_shrink=False, start=index, dimensions=dimensions)
    assert not results.failures
    ((_, row),) = results.programs
    prototype = {label: r for label, r in row.items() if label.startswith("prototype")}
    assert prototype and all(r.outcome.kind == "match" and not r.fallbacks for r in prototype.values()), {
        label: (r.outcome.kind, r.fallbacks[:1]) for label, r in prototype.items()
    }


# Fuzz programs (seed 1502, every dimension) whose dirty-marking Function fell back on ee149c9: the cut around it
# was refused, a later segment writing a value handed over that requires grad. With a non-leaf example for such a
# value (segments._example) each matches eager under every prototype setting, with no fallback. 93's handed value
# is written both through MarkDirty (in eager) and through a detached alias (in the segment after it): refused
# under compile_function from 3970915 to 68f7410, which counted every write of the program where only the
# segment's own writes reach its compile (graph_meta.only_hidden_writes).
SEED_1502_HANDED_WRITE = [670, 93]


@pytest.mark.parametrize("index", SEED_1502_HANDED_WRITE)
def test_fuzz_programs_whose_later_segment_writes_a_handed_value_match_eager(index: int) -> None:
    from predispatch_views.compare.fuzz import fuzz, fuzz_strategies
    from predispatch_views.compare.fuzz_program import parse_dimensions

    dimensions = parse_dimensions("all")
    results = fuzz(
        1, 1502, fuzz_strategies("aot_eager", dimensions), do_shrink=False, start=index, dimensions=dimensions
    )
    ((_, row),) = results.programs
    prototype = {label: r for label, r in row.items() if label.startswith("prototype")}
    assert prototype and all(r.outcome.kind == "match" and not r.fallbacks for r in prototype.values()), {
        label: (r.outcome.kind, r.fallbacks[:1]) for label, r in prototype.items()
    }


def writes_a_functions_view_through_a_detached_alias(d: torch.Tensor) -> Any:  # fuzzer s1601_1024, shrunk
    t0 = d.tanh()
    t4, _ = d.split_with_sizes([2, 1], 0)
    t6 = ReturnsInput.apply(t4)  # runs in eager between two compiled segments: eager's view, IN_CUSTOM_FUNCTION
    t6.detach().mul_(3.0)  # hidden from autograd in eager; the later segment is handed t6, requiring grad
    return t0, t4  # (t6's grad_fn names Dynamo's ApplyTemplate under the backend, ReturnsInput in eager)


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_hidden_write_of_a_handed_value_stays_hidden(entry: str) -> None:
    """A later segment's write through a detached alias of a value handed over requiring grad: compiled for a
    non-leaf example (e17ed8a), AOTAutograd recorded the write as a copy_ into ``t6``, which raised on the custom
    Function's view where eager's write is hidden (fuzzer s1601_1024, a crash where stock runs). A value written
    only so gets a leaf example, for which AOTAutograd hides the write too."""
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    fn = writes_a_functions_view_through_a_detached_alias
    if entry == "backend":
        compiled = torch.compile(fn, backend=pv.backend("aot_eager", strict=True))
    else:
        compiled = pv.compile_function(fn, inner="aot_eager", strict=True)
    assert_matches_eager(fn, compiled, lambda: [torch.randn(3, 1, generator=torch.Generator().manual_seed(0),
                                                            requires_grad=True).mul(1)])  # fmt: skip
    assert not pv.FALLBACKS, list(pv.FALLBACKS)


def writes_a_functions_view_under_no_grad(a: torch.Tensor) -> Any:  # fuzzer s1826_557, shrunk
    t0 = a.exp()
    t1 = a.narrow(1, 0, 2)
    t2 = ReturnsInput.apply(t1)  # runs in eager: eager's view of t1, IN_CUSTOM_FUNCTION
    with torch.no_grad():
        t2.zero_()  # AOTAutograd's copy_ of it would read its grad_fn, which raises: runs in eager too
    t5 = t1.narrow(0, 0, 1).transpose(1, 0).expand(2, 3)
    return t0, t5.add(1.0), a


@pytest.mark.parametrize("entry", ["backend", "backend_dynamic", "compile_function"])
def test_a_no_grad_write_of_a_functions_view_runs_in_eager_with_the_call(entry: str) -> None:
    """The segment after the Function's call wrote its view under no_grad: the cut was refused, since compiled,
    that write reads the view's ``grad_fn`` (s1701_803), and the program fell back to stock. The uncompiled segment
    now runs from the call through the write (Note [Segments]), as eager runs both; the rest is compiled."""
    fn = writes_a_functions_view_under_no_grad
    compiled = strict_compiled(fn, entry.replace("_dynamic", "")) if entry != "backend_dynamic" else None
    if compiled is None:
        torch._dynamo.reset()
        pv.FALLBACKS.clear()
        compiled = torch.compile(fn, backend=pv.backend("aot_eager", strict=True), dynamic=True)
    pipeline.GRAPHS.clear()
    assert_matches_eager(fn, compiled, lambda: [torch.randn(1, 3, generator=torch.Generator().manual_seed(0),
                                                            requires_grad=True)])  # fmt: skip
    assert not pv.FALLBACKS, list(pv.FALLBACKS)
    if entry != "compile_function":
        assert any("segments" in detail for _, _, detail in pipeline.GRAPHS), list(pipeline.GRAPHS)


def reads_a_multi_output_view_whose_base_a_function_wrote(a: torch.Tensor) -> Any:  # fuzzer s1827_85, shrunk
    t1 = a.sigmoid().sin()
    t3, _ = t1.expand(2, 3, 1).unbind(0)
    t6 = MarkDirty.apply(t1)  # runs in eager: writes t1, the base of the unbind's outputs
    t7 = t3.clone()  # a read of a multi-output view whose base was written: eager's lazy error, where grad is on
    return t6, t7, t7[1:2]


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_read_of_a_restricted_view_after_a_functions_write_runs_in_eager(entry: str) -> None:
    """The segment after MarkDirty's call read ``t3`` (an unbind output whose base the call wrote): compiled, the read
    asks for its ``grad_fn`` on every call, so the cut was refused and the program fell back. The uncompiled segment
    now runs through the read (Note [Segments]): no fallback, eager's values; with grad on, eager's own error."""
    fn = reads_a_multi_output_view_whose_base_a_function_wrote

    def inputs(requires_grad: bool) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(0)
        return [torch.randn(3, 1, generator=gen, requires_grad=requires_grad).mul(1)]

    assert_matches_eager(fn, strict_compiled(fn, entry), lambda: inputs(False))
    assert not pv.FALLBACKS, list(pv.FALLBACKS)
    with pytest.raises(RuntimeError, match="Output 0 of Unbind is a view and its base") as want:
        fn(*inputs(True))
    if entry == "backend":  # Dynamo's own trace raises first (its fake tensor call): the ceiling's error
        torch._dynamo.reset()
        with pytest.raises(RuntimeError) as want:
            torch.compile(fn, backend="eager")(*inputs(True))
    with pytest.raises(RuntimeError) as got:
        strict_compiled(fn, entry)(*inputs(True))
    assert str(got.value).split("\n")[0] == str(want.value).split("\n")[0]


def marks_dirty_then_writes_through_a_detached_alias(a: torch.Tensor) -> Any:  # fuzzer s1821_743, shrunk
    t0 = a.cos()
    t1 = MarkDirty.apply(t0)  # runs in eager between two compiled segments: a write autograd records
    t2 = t0.detach()
    t2.mul_(3.0)  # the later segment's only write of t0's storage, hidden from autograd as in eager
    return t0, t1, t2


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_hidden_write_after_a_dirty_marking_call_stays_hidden(entry: str) -> None:
    """The segment after the Function is handed ``t0`` requiring grad and writes it only through a detached alias:
    it gets a leaf example, for which AOTAutograd hides the write as eager does. The program's other write of that
    storage (the Function's ``mark_dirty``) runs in eager, in another segment, and no longer counts: the cut was
    refused before ("mul_ writes detach hidden from autograd, handed over and requiring grad")."""
    fn = marks_dirty_then_writes_through_a_detached_alias
    compiled = strict_compiled(fn, entry)
    assert_matches_eager(fn, compiled, lambda: [torch.randn(3, generator=torch.Generator().manual_seed(0),
                                                            requires_grad=True).mul(1)])  # fmt: skip
    assert not pv.FALLBACKS, list(pv.FALLBACKS)


def returns_a_detached_input_then_writes_out(c: torch.Tensor) -> Any:  # fuzzer s1822_82, shrunk
    t5 = c.detach().narrow(0, 0, 2)
    t6 = ReturnsInput.apply(t5)  # runs in eager: t5 requires no grad, so neither does t6
    u2, u3 = torch.empty(0), torch.empty(0, dtype=torch.long)
    torch.min(t6, 0, out=(u2, u3))  # eager raises where an argument requires grad
    return t5, t6, u2


def test_a_functions_output_of_a_detached_value_requires_no_grad_in_the_segment_after_it() -> None:
    """The record counted ``c.detach()`` as requiring grad (c does), so the segment after the Function was compiled
    for an input requiring grad and its ``out=`` call raised; the function ran eagerly."""
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    fn = returns_a_detached_input_then_writes_out
    compiled = pv.compile_function(fn, inner="aot_eager", strict=True)
    assert_matches_eager(fn, compiled, lambda: [torch.randn(3, generator=torch.Generator().manual_seed(0),
                                                            requires_grad=True)])  # fmt: skip
    assert not pv.FALLBACKS, list(pv.FALLBACKS)


def unbinds_then_writes_a_row_after_a_metadata_write(a: torch.Tensor, b: torch.Tensor) -> Any:  # s1822_379
    _, t2, t3, t4 = a.unbind(1)
    b.unsqueeze_(2)  # an input's own metadata write: runs in eager between two compiled segments
    t4.mul_(2.0)  # the later segment writes the base of the restricted views the earlier one handed over
    return t2, t3


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_write_of_a_handed_restricted_views_base_with_grad_off_is_cut(mode: str) -> None:
    """Note [Segments]: the refusal guards the lazy error AOTAutograd's autograd.Function would read early from
    the handed views' grad_fn; with grad mode off at the call no compiled segment has one (the function ran
    eagerly: "mul_ writes getitem_3, whose base an earlier segment handed over as a restricted view")."""

    def run(f: Callable[..., Any]) -> Any:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(2, 4, generator=g, requires_grad=True).mul(1), torch.randn(2, 2, generator=g)
        with getattr(torch, mode)():  # read inside: with grad on, eager's views refuse even a clone
            out = f(a, b)
            return [(o.clone(), o.requires_grad, o._is_view(), o._base is a) for o in out], a.clone(), b.shape

    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    fn = unbinds_then_writes_a_row_after_a_metadata_write
    actual = run(pv.compile_function(fn, inner="aot_eager", strict=True))
    assert not pv.FALLBACKS, list(pv.FALLBACKS)
    assert_same(actual, run(fn))


def transposes_then_writes_a_row(a: torch.Tensor) -> Any:  # test_aotdispatch's test_input_data_and_metadata_mutation
    a.t_()
    a[0].mul_(2)
    return a.view(a.shape)


def test_a_segment_writing_a_handed_value_that_requires_grad_records_the_write() -> None:
    # Cut after the t_, the second segment was compiled for a leaf example of the transposed input, and AOTAutograd
    # applied its write without recording it in autograd: the input's gradient lost the factor 2 (a silent wrong
    # gradient, found by PyTorch's test_aotdispatch.py). The cut was refused since (the function ran eagerly); the
    # example is a non-leaf now, as eager's value, and the write is recorded: eager's gradient, no fallback. The
    # input is no view, so its grad_fn is AOTAutograd's copy (a compiled node by design) where eager's is the slice's.
    def run(fn: Callable[..., Any]) -> tuple[torch.Tensor, str]:
        leaf = torch.randn(3, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
        a = leaf.clone()
        out = fn(a)
        (out * torch.arange(9.0).reshape(3, 3)).sum().backward()
        return leaf.grad, type(a.grad_fn).__name__

    predispatch_views.FALLBACKS.clear()
    actual = run(predispatch_views.compile_function(transposes_then_writes_a_row, inner="aot_eager", strict=True))
    expected = run(transposes_then_writes_a_row)
    torch.testing.assert_close(actual[0], expected[0])
    assert (actual[1], expected[1]) == ("CopyBackwards", "CopySlices")
    assert not predispatch_views.FALLBACKS, list(predispatch_views.FALLBACKS)


def marks_dirty_a_base_whose_reader_saves_another_value(a: torch.Tensor) -> Any:
    t0 = a * 2
    t1 = (t0 + 1).cos()  # cos saves t0 + 1, not t0; the partitioner may save t0 and recompute t0 + 1
    t2 = MarkDirty.apply(t0)  # runs in eager between two compiled segments; writes t0
    return t2.split(2), t1


def writes_a_viewed_base_whose_reader_saves_another_value(a: torch.Tensor) -> Any:
    t0 = a * 2
    v = t0.view(8)
    t1 = (t0 + 1).cos()
    t0.mul_(3)  # replayed in eager after the core
    return v, t1


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize(
    "fn",
    [marks_dirty_a_base_whose_reader_saves_another_value, writes_a_viewed_base_whose_reader_saves_another_value],
    ids=lambda f: f.__name__,
)
def test_a_write_to_a_base_eager_never_saves_is_replayed_not_refused(fn: Callable[..., Any], entry: str) -> None:
    """Note [Bases the compiled backward must not save]: where the compiled region may save a written base (or
    recompute from it) but eager's backward reads no value of its storage, the region's nodes of that storage are
    tagged for recomputation, and the write runs in eager: a cut around the dirty-marking Function, a write replayed
    after the core. Both fell back before (refused cut; WRITE_TO_A_BASE_THE_CORE_MAY_SAVE)."""
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    if entry == "backend":
        compiled = torch.compile(fn, backend=pv.backend("aot_eager", strict=True))
    else:
        compiled = pv.compile_function(fn, inner="aot_eager", strict=True)
    assert_matches_eager(fn, compiled, lambda: [torch.randn(4, 2, generator=torch.Generator().manual_seed(0),
                                                            requires_grad=True)])  # fmt: skip
    assert not pv.FALLBACKS, list(pv.FALLBACKS)


def detaches_a_saved_value_after_the_call(x: torch.Tensor) -> Any:  # fuzzer s1817_601, shrunk
    c = x.clone()
    s = x.sigmoid()
    with torch.no_grad():
        x.copy_(s)
    t = c.tanh()  # tanh saves its result for backward
    return ScaledClone.apply(ReturnsInput.apply(s)), t.detach()


def detaches_after_a_metadata_write(x: torch.Tensor) -> Any:
    c = x.clone()
    s = x.sigmoid()
    with torch.no_grad():
        x.copy_(s)
    t = c.tanh()
    y = ScaledClone.apply(ReturnsInput.apply(s))
    t.t_()  # what the detach sees differs from the value before the write: it stays where it is
    return y, t.detach()


@pytest.mark.parametrize("fn", [detaches_a_saved_value_after_the_call, detaches_after_a_metadata_write])
def test_a_detach_after_a_cut_saves_nothing_for_its_value(fn: Callable[..., Any]) -> None:
    """Note [A detach crosses no cut]: the caller writes the detached value, which shares its version counter with
    ``tanh``'s saved result; eager's backward through the other output never reaches ``tanh`` and runs. The value
    crossed the cut requiring grad, so the compiled segment (one autograd node) saved it and raised the version
    error on every backward."""

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    def run(f: Callable[..., Any]) -> tuple[torch.Tensor, torch.Tensor]:
        (x,) = make_inputs()
        y, d = f(x)
        d.mul_(2)
        y.sum().backward()
        return d, x.grad

    strict = fn is detaches_a_saved_value_after_the_call
    compiled = predispatch_views.compile_function(fn, inner="aot_eager", strict=strict)
    for got, expected in zip(run(compiled), run(fn)):
        torch.testing.assert_close(got, expected)
    assert_matches_eager(fn, compiled, make_inputs)


def writes_through_two_handed_aliases(a: torch.Tensor, xs: list[torch.Tensor]) -> Any:  # fuzzer s1819_357
    u1 = torch.empty_like(xs[0])
    with torch.no_grad():
        torch.tanh(xs[0], out=u1)
    t0 = a.tanh()
    t0.unsqueeze_(1)
    t1 = a[1:2]
    t2 = ReturnsInput.apply(a)  # cut around: the segment after it is handed t2 and t1, both views of a
    with torch.no_grad():
        xs[1].mul_(2.0)
    t2.mul_(-1.0)
    torch.add(t1, t1, out=t1)  # a write through t1 that ScaledClone, reading t2, must see
    t3 = t0 @ t0.t()
    u4 = torch.stack(xs)
    return t2, t3, t1.t(), ScaledClone.apply(t2), u4


def test_segment_inputs_that_alias_each_other_alias_in_their_examples() -> None:
    """A segment handed two values that share a storage (``t1 = a[1:2]`` from the segment before, ``t2`` from the
    call run in eager) was compiled for examples that did not: its core, sliced into independent parts, ran
    ``ScaledClone.apply(t2)`` before the write through ``t1``, and returned ``a[1]`` unscaled (a silent wrong value).
    Their examples now share the storage (crossing_values.sources_sharing_storage)."""

    def make_inputs() -> list[Any]:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(2, generator=g)
        return [
            a,
            [torch.randn(1, 2, generator=g).requires_grad_() for _ in range(2)] + [torch.randn(1, 2, generator=g)],
        ]

    fn = writes_through_two_handed_aliases
    compiled = predispatch_views.compile_function(fn, inner="aot_eager")
    actual, expected = compiled(*make_inputs()), fn(*make_inputs())
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want)


def hidden_write_of_a_saved_result(x: torch.Tensor) -> Any:
    y = x.exp()  # saves its result
    y.detach().mul_(3.0)
    return y.split(2)


def no_grad_write_of_a_saved_result(x: torch.Tensor) -> Any:
    y = x.sigmoid()
    with torch.no_grad():
        y.view(-1).zero_()
    return y.split(2)


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize("fn", [hidden_write_of_a_saved_result, no_grad_write_of_a_saved_result])
def test_a_hidden_write_of_a_saved_value_through_a_full_view_is_not_cut(fn: Callable[..., Any], entry: str) -> None:
    """Note [A write through a view of a base the epilogue views]: a compiled segment would bump the written input's
    version twice, and eager's backward error names the count ("Exp, is at version 1"): the program is not cut there
    and still matches eager (the inner backend's trace raises the version error, so it runs uncompiled)."""
    torch._dynamo.reset()
    pv.FALLBACKS.clear()
    compiled = (
        pv.compile_function(fn, inner="aot_eager")
        if entry == "compile_function"
        else torch.compile(fn, backend=pv.backend("aot_eager"))
    )
    assert_matches_eager(fn, compiled, _seeded(lambda: [torch.randn(4, 3, requires_grad=True)]))
    assert any("through a view" in reason for _, reason in pv.FALLBACKS), list(pv.FALLBACKS)


def dirty_call_after_a_saving_write(a: torch.Tensor) -> Any:
    t0 = a.clone()
    t0.sin_()  # a compiled segment before the call may save t0, which MarkDirty then writes
    t1 = t0[1:2]
    t2 = MarkDirty.apply(t0)
    return t1, t2


def dirty_call_after_a_saving_producer(a: torch.Tensor) -> Any:
    t0 = a.exp()  # exp saves its result, which MarkDirty writes: eager's backward raises at ExpBackward0
    t1 = t0.expand_as(t0)
    t2 = MarkDirty.apply(t0)
    return t1, t2.mul(2).split(2)


def dirty_call_on_a_functions_result(a: torch.Tensor) -> Any:
    t0, t1 = a.tensor_split(2, 0)
    t2 = ScaledClone.apply(t1)  # Dynamo's autograd_function_apply returns a tuple: t2 is its getitem
    t3 = MarkDirty.apply(t2)  # writes t2, which ScaledClone's compiled node may save: run in eager from the call
    return t3, t0.expand_as(t0), t0.sin(), a


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
@pytest.mark.parametrize(
    "fn", [dirty_call_after_a_saving_write, dirty_call_after_a_saving_producer, dirty_call_on_a_functions_result]
)
def test_the_uncompiled_segment_of_a_dirty_call_starts_at_the_saver(fn: Callable[..., Any], entry: str) -> None:
    """The cut around a custom Function marking its input dirty was refused where the compiled segment before the
    call may save the value the call writes (fuzzer s1826_1926): the uncompiled segment now starts at that saver
    (``RunEagerlyFrom``), so eager's own node saves what eager's saves, and the program matches eager with no
    fallback (strict), its backward's version error included. Where the saver is one result of a multi-output call
    (a Function's ``getitem``), the segment starts at the call: its tuple is no value to hand over (s1829_104)."""
    torch._dynamo.reset()
    compiled = strict_compiled(fn, entry)
    assert_matches_eager(fn, compiled, _seeded(lambda: [torch.randn(4, 3, requires_grad=True).mul(1)]))


def saved_write_before_a_dirty_call(a: torch.Tensor) -> Any:
    t0 = a.sigmoid()  # saves its result, which zero_ overwrites: eager's backward raises at SigmoidBackward0
    t0.zero_()
    t1 = t0 * a
    t2 = MarkDirty.apply(t1)  # runs in eager: the program is cut around it
    t3 = t0 - t2
    return t2, t3.t(), t1.mul(2)


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_the_first_segment_is_cut_around_a_write_to_a_saved_value(entry: str) -> None:
    """The segment before the dirty call holds ``sigmoid`` and the write over its result: its compile raised the
    version error, and segments were never cut around such a write (their inputs' earlier writes are not in their
    graph). The first segment reads only the program's inputs, so it is cut as the program is (Note [A write to a
    value a backward saved]; fuzzer s1829_87): no fallback, and eager's values, grads and error."""
    compiled = strict_compiled(saved_write_before_a_dirty_call, entry)
    make = _seeded(lambda: [torch.randn(3, 3, requires_grad=True).mul(1)])
    assert_matches_eager(saved_write_before_a_dirty_call, compiled, make)


def sibling_view_read_after_a_no_grad_write(a: torch.Tensor, c: torch.Tensor) -> Any:
    t0 = c.tanh()  # c requires no grad: neither does any view of t0
    t0.t_()
    _, t2, t3, t4 = t0.unbind(1)
    with torch.no_grad():
        t4.copy_(t2)  # through a view of a base whose metadata changed: replayed in eager, cut after
    t5 = t3.narrow(0, 0, 2)  # reads a multi-output view whose base was written: its grad_fn is None, no error
    return t5, t5.mul(2), a.sin().unbind(0)


@pytest.mark.parametrize("entry", ["backend", "compile_function"])
def test_a_restricted_view_of_a_storage_nothing_differentiates_crosses_a_cut(entry: str) -> None:
    """The second segment reads ``t2``, a multi-output view whose base the first wrote: the cut was refused, for
    eager's lazy error ("Output 1 of Unbind is a view and its base ... modified inplace") a compiled function would
    read early. A view of a storage with no value requiring grad has ``grad_fn`` None and raises nothing, so the
    cut stands (fuzzer s1829_602): no fallback, eager's values, views and grads."""

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(3, 2, requires_grad=True).mul(1), torch.randn(4, 3)]

    compiled = strict_compiled(sibling_view_read_after_a_no_grad_write, entry)
    assert_matches_eager(sibling_view_read_after_a_no_grad_write, compiled, _seeded(make_inputs))
