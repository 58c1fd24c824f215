"""explain(): every stage for the seed program and for a mutation of the base before its views; the CLI path.

The expected texts are what design/ shows a reviewer; besides matching them, each test checks the design's claims
on the GraphModules themselves: one unbind, in the epilogue; no as_strided anywhere; the mutation of the base
before its views stays in the core (functionalized in the view-preserving functional graph, kept as the user
wrote it in the core handed to the inner backend, whose AOTAutograd functionalizes it below autograd); the
prototype's outputs carry eager's view node.
"""

from __future__ import annotations

import contextlib
import io

import torch
from expecttest import TestCase
from torch import fx

import predispatch_views
from predispatch_views.__main__ import main
from predispatch_views.explain import STAGE_TIMES, Explanation, explain
from predispatch_views.explain_cli import parse_args_expression
from predispatch_views.functionalize import EPILOGUE_TAG


def seed(x):
    intermediate = x.mul(2)
    return intermediate.unbind(0)


def mutate_then_view(x):
    y = x.mul(2)
    y.add_(1)
    return y.unbind(0)


def _stable(e: Explanation) -> str:
    """The report without its last section, the compile time by stage (CPU milliseconds differ between runs)."""
    text = str(e)
    marker = text.rindex(f". {STAGE_TIMES} ==")
    return text[: text.rindex("\n\n== ", 0, marker)] + "\n"


def _targets(gm: fx.GraphModule | None) -> list[str]:
    assert gm is not None
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


class TestExplain(TestCase):
    def setUp(self) -> None:
        torch._dynamo.reset()

    def _check_design_claims(self, e: Explanation) -> None:
        for gm in (e.pre_dispatch, e.functional, e.core, e.epilogue):
            self.assertFalse(any("as_strided" in t for t in _targets(gm)))
        self.assertEqual([t for t in _targets(e.epilogue) if t != "<built-in function getitem>"], ["aten.unbind.int"])
        self.assertNotIn("aten.unbind.int", _targets(e.core))
        # The view-preserving functional graph has no in-place op outside the epilogue.
        functional_core = [
            n for n in e.functional.graph.nodes if n.op == "call_function" and not n.meta.get(EPILOGUE_TAG)
        ]
        self.assertFalse(any(str(n.target).endswith("_.Tensor") for n in functional_core))
        self.assertEqual(e.fallback_reasons, [])
        self.assertEqual(e.autograd["prototype[aot_eager]"].node_counts.get("UnbindBackward0"), 1)

    def test_seed(self) -> None:
        e = explain(seed, torch.randn(3, 4, requires_grad=True))
        self._check_design_claims(e)
        self.assertExpectedInline(
            _stable(e),
            """\
explain seed (inner backend: aot_eager)

== 1. pre-dispatch graph ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    unbind = torch.ops.aten.unbind.int(mul)
    getitem: "f32[4]" = unbind[0]
    getitem_1: "f32[4]" = unbind[1]
    getitem_2: "f32[4]" = unbind[2]
    return [getitem, getitem_1, getitem_2]

== 2. view-preserving functional graph (# epilogue: replayed in eager) ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    unbind = torch.ops.aten.unbind.int(mul)  # epilogue
    getitem: "f32[4]" = unbind[0]  # epilogue
    getitem_1: "f32[4]" = unbind[1]  # epilogue
    getitem_2: "f32[4]" = unbind[2]  # epilogue
    return [getitem, getitem_1, getitem_2]

== 3. core graph (handed to aot_eager) ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    return (mul,)

== 4. epilogue graph ==
def forward(self, mul: "f32[3, 4]"):
    unbind = torch.ops.aten.unbind.int(mul)
    getitem: "f32[4]" = unbind[0]
    getitem_1: "f32[4]" = unbind[1]
    getitem_2: "f32[4]" = unbind[2]
    return [getitem, getitem_1, getitem_2]

== 5. epilogue source (run on every call) ==
def run(*args):
    core = _core(*args)
    v0 = core[0]
    v1 = _aten_unbind_int_0(v0)
    v2 = v1[0]
    v3 = v1[1]
    v4 = v1[2]
    return (v2, v3, v4, )

== 6. fallback reasons ==
none

== 7. autograd graph of the outputs (node counts by type, AccumulateGrad excluded) ==
eager:                {"UnbindBackward0": 1, "MulBackward0": 1}; 3 outputs, 3 views of 1 base
stock[aot_eager]:     {"CompiledFunctionBackward": 1}; 3 outputs, 0 views
prototype[aot_eager]: {"UnbindBackward0": 1, "CompiledFunctionBackward": 1}; 3 outputs, 3 views of 1 base
""",
        )

    def test_mutation_of_the_base_before_its_views(self) -> None:
        e = explain(mutate_then_view, torch.randn(3, 4, requires_grad=True))
        self._check_design_claims(e)
        self.assertIn("aten.add_.Tensor", _targets(e.pre_dispatch))
        # Functionalized in the functional graph; the core handed to the inner backend keeps the user's add_ and
        # AOTAutograd functionalizes it below autograd (Note [The compiled core keeps the user's mutations]).
        self.assertIn("aten.add.Tensor", _targets(e.functional))
        self.assertIn("aten.add_.Tensor", _targets(e.core))
        self.assertExpectedInline(
            _stable(e),
            """\
explain mutate_then_view (inner backend: aot_eager)

== 1. pre-dispatch graph ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    add_: "f32[3, 4]" = torch.ops.aten.add_.Tensor(mul, 1)
    unbind = torch.ops.aten.unbind.int(add_)
    getitem: "f32[4]" = unbind[0]
    getitem_1: "f32[4]" = unbind[1]
    getitem_2: "f32[4]" = unbind[2]
    return [getitem, getitem_1, getitem_2]

== 2. view-preserving functional graph (# epilogue: replayed in eager) ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    add: "f32[3, 4]" = torch.ops.aten.add.Tensor(mul, 1)
    unbind = torch.ops.aten.unbind.int(add)  # epilogue
    getitem: "f32[4]" = unbind[0]  # epilogue
    getitem_1: "f32[4]" = unbind[1]  # epilogue
    getitem_2: "f32[4]" = unbind[2]  # epilogue
    return [getitem, getitem_1, getitem_2]

== 3. core graph (handed to aot_eager) ==
def forward(self, arg0_1: "f32[3, 4]"):
    mul: "f32[3, 4]" = torch.ops.aten.mul.Tensor(arg0_1, 2)
    add_: "f32[3, 4]" = torch.ops.aten.add_.Tensor(mul, 1)
    return (add_,)

== 4. epilogue graph ==
def forward(self, add_: "f32[3, 4]"):
    unbind = torch.ops.aten.unbind.int(add_)
    getitem: "f32[4]" = unbind[0]
    getitem_1: "f32[4]" = unbind[1]
    getitem_2: "f32[4]" = unbind[2]
    return [getitem, getitem_1, getitem_2]

== 5. epilogue source (run on every call) ==
def run(*args):
    core = _core(*args)
    v0 = core[0]
    v1 = _aten_unbind_int_0(v0)
    v2 = v1[0]
    v3 = v1[1]
    v4 = v1[2]
    return (v2, v3, v4, )

== 6. fallback reasons ==
none

== 7. autograd graph of the outputs (node counts by type, AccumulateGrad excluded) ==
eager:                {"UnbindBackward0": 1, "AddBackward0": 1, "MulBackward0": 1}; 3 outputs, 3 views of 1 base
stock[aot_eager]:     {"CompiledFunctionBackward": 1}; 3 outputs, 0 views
prototype[aot_eager]: {"UnbindBackward0": 1, "CompiledFunctionBackward": 1}; 3 outputs, 3 views of 1 base
""",
        )

    def test_fallback_is_explained(self) -> None:
        def resize_under_a_kept_view(x):  # Note [set_ between segments]: no cut under a view kept across
            y = x.mul(2)
            row = y[0]
            y.resize_(5, 4)
            return row, *y[:3].split(1)

        e = explain(resize_under_a_kept_view, torch.randn(3, 4))
        self.assertIsNone(e.functional)
        sections = e.sections()
        self.assertExpectedInline(
            "\n".join(f"{k}: {sections[k]}" for k in ("core graph (handed to aot_eager)", "fallback reasons")),
            """\
core graph (handed to aot_eager): (none: the program fell back to stock AOTAutograd)
fallback reasons: aten.resize_.default changes a tensor's storage (resize_)""",
        )

    def test_sections_are_kept_as_graph_modules(self) -> None:
        e = explain(seed, torch.randn(5, 2, requires_grad=True))
        for gm in (e.pre_dispatch, e.functional, e.core, e.epilogue):
            self.assertIsInstance(gm, fx.GraphModule)
        self.assertIs(e.program.sliced.core, e.core)
        self.assertEqual(e.autograd["eager"].n_outputs, 5)
        self.assertEqual(e.autograd["stock[aot_eager]"].n_views, 0)

    def test_the_report_ends_with_the_compile_time_by_stage(self) -> None:
        e = explain(seed, torch.randn(3, 4, requires_grad=True))
        stages = list(e.program.stage_seconds)
        self.assertEqual(stages, ["capture", "select", "functionalize", "slice", "inner compile", "runtime"])
        self.assertTrue(all(t >= 0 for t in e.program.stage_seconds.values()))
        self.assertTrue(str(e).rstrip().splitlines()[-1].startswith("program: capture "))

    def test_public_api(self) -> None:
        self.assertIs(predispatch_views.explain, explain)
        self.assertIn("explain", predispatch_views.__all__)

    def test_args_expression(self) -> None:
        x, y, n = parse_args_expression("randn(2, 3, requires_grad=True), arange(4, dtype=float64), 7")
        self.assertEqual((x.shape, x.requires_grad, y.dtype, n), ((2, 3), True, torch.float64, 7))
        self.assertEqual(parse_args_expression(""), [])

    def test_cli(self) -> None:
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            rc = main(["explain", "tests.test_explain:seed", "--args", "randn(3, 4, requires_grad=True)"])
        self.assertEqual(rc, 0)
        torch._dynamo.reset()
        printed, expected = stdout.getvalue(), explain(seed, torch.randn(3, 4, requires_grad=True))
        self.assertEqual(printed[: printed.rindex("\n\n== ")] + "\n", _stable(expected))
