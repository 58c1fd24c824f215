"""Each stage's graph for the seed program and for a mutation of the base before its views."""

from __future__ import annotations

import pytest
import torch
from expecttest import TestCase

from predispatch_views.capture import capture_function
from predispatch_views.pipeline import CompiledProgram, compile_captured
from tests.test_explain import mutate_then_view, seed


def _compile(fn, *args) -> CompiledProgram:
    graph, _ = capture_function(lambda *a: list(fn(*a)), list(args))
    return compile_captured(graph, list(args), "aot_eager", strict=True)


class TestStages(TestCase):
    def test_seed(self) -> None:
        program = _compile(seed, torch.randn(3, 4, requires_grad=True))
        self.assertExpectedInline(
            program.functional.code.strip(),
            """\
def forward(self, arg0_1):
    mul = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None
    unbind = torch.ops.aten.unbind.int(mul);  mul = None
    getitem = unbind[0]
    getitem_1 = unbind[1]
    getitem_2 = unbind[2];  unbind = None
    return [getitem, getitem_1, getitem_2]""",
        )
        self.assertExpectedInline(
            program.sliced.core.code.strip(),
            """\
def forward(self, arg0_1):
    mul = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None
    return (mul,)""",
        )
        self.assertExpectedInline(
            program.epilogue_source.strip(),
            """\
def run(*args):
    core = _core(*args)
    v0 = core[0]
    v1 = _aten_unbind_int_0(v0)
    v2 = v1[0]
    v3 = v1[1]
    v4 = v1[2]
    return (v2, v3, v4, )""",
        )

    def test_mutation_of_the_base_before_its_views(self) -> None:
        program = _compile(mutate_then_view, torch.randn(3, 4, requires_grad=True))
        self.assertExpectedInline(
            program.pre_dispatch.code.strip(),
            """\
def forward(self, arg0_1):
    mul = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None
    add_ = torch.ops.aten.add_.Tensor(mul, 1);  mul = None
    unbind = torch.ops.aten.unbind.int(add_);  add_ = None
    getitem = unbind[0]
    getitem_1 = unbind[1]
    getitem_2 = unbind[2];  unbind = None
    return [getitem, getitem_1, getitem_2]""",
        )
        self.assertExpectedInline(
            program.functional.code.strip(),
            """\
def forward(self, arg0_1):
    mul = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None
    add = torch.ops.aten.add.Tensor(mul, 1);  mul = None
    unbind = torch.ops.aten.unbind.int(add);  add = None
    getitem = unbind[0]
    getitem_1 = unbind[1]
    getitem_2 = unbind[2];  unbind = None
    return [getitem, getitem_1, getitem_2]""",
        )
        self.assertExpectedInline(
            program.epilogue_source.strip(),
            """\
def run(*args):
    core = _core(*args)
    v0 = core[0]
    v1 = _aten_unbind_int_0(v0)
    v2 = v1[0]
    v3 = v1[1]
    v4 = v1[2]
    return (v2, v3, v4, )""",
        )


@pytest.fixture
def pre_dispatch_traces(monkeypatch) -> list[str]:
    """Every pre-dispatch trace made while the test runs, with an empty capture cache (Note [The capture cache])."""
    from predispatch_views import _torch_internals as ti
    from predispatch_views import capture_cache

    traces: list[str] = []
    original = ti.trace_pre_dispatch

    def counting(fn, args):
        traces.append(getattr(fn, "__name__", "?"))
        return original(fn, args)

    monkeypatch.setattr(ti, "trace_pre_dispatch", counting)
    monkeypatch.setattr(capture_cache, "_CAPTURES", type(capture_cache._CAPTURES)())
    return traces


def test_compiling_traces_once_and_the_functional_graph_only_when_asked(pre_dispatch_traces) -> None:
    # Issue 23: the view-preserving functional graph is for explain(); a core that mutates must not pay for it.
    from predispatch_views.pipeline import compile_dynamo_graph

    traces = pre_dispatch_traces
    programs = []

    def recording_backend(gm, example_inputs):
        programs.append(compile_dynamo_graph(gm, example_inputs, "aot_eager"))
        return programs[-1].run

    def f(x):
        y = x.mul(2)
        y.add_(1)  # the core mutates an intermediate
        return y.unbind(0)

    x = torch.randn(3, 2, requires_grad=True)
    outs = torch.compile(f, backend=recording_backend)(x)
    torch.testing.assert_close(torch.stack(outs), torch.stack(f(x)))
    assert len(traces) == 1, traces  # the capture only
    functional = programs[0].functional
    assert len(traces) == 2, traces  # built on first access
    assert "add_" not in functional.code and "aten.add.Tensor" in functional.code
    assert programs[0].functional is functional and len(traces) == 2


def test_a_warm_compile_of_the_same_graph_does_no_pre_dispatch_trace(pre_dispatch_traces) -> None:
    # Issue 23, Note [The capture cache]: after torch._dynamo.reset() Dynamo hands the same graph again.
    import predispatch_views
    from tests.parity_utils import assert_matches_eager

    traces = pre_dispatch_traces

    def f(x):
        y = x.sin()
        y.mul_(2)
        return y.chunk(2)

    def make_inputs() -> list[torch.Tensor]:
        return [torch.randn(4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)]

    for _ in range(2):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=predispatch_views.backend("aot_eager", strict=True))
        assert_matches_eager(f, compiled, make_inputs)
    assert len(traces) == 1, traces
    # Other metadata is another key; symbolic sizes are never kept.
    torch._dynamo.reset()
    torch.compile(f, backend=predispatch_views.backend("aot_eager"))(torch.randn(4, 3))
    assert len(traces) == 2, traces
    for _ in range(2):
        torch._dynamo.reset()
        torch.compile(f, backend=predispatch_views.backend("aot_eager"), dynamic=True)(torch.randn(6, 3))
    assert len(traces) == 4, traces
