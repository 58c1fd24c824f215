"""``compare --models``: tiny Hugging Face models under every strategy (needs ``pip install -e ".[models]"``).

Each model is built in code from a tiny config (no hub download, random weights, dropout 0) and called as its
users call it, with the cache on for decoders. Per model and strategy, against eager on the same weights:
- outputs and parameter grads (loss: mean of squares of every floating output tensor, caches included);
- the alias structure of the returned tensors (caches included): which are views, which share storage;
- in-place behaviour: ``add_(0)`` on each returned tensor of a fresh call, raises or not, with eager's message;
- Dynamo graphs and graph breaks (``torch._dynamo.utils.counters``), prototype fallbacks with their reasons;
- compile time: wall time of the first forward+backward, caches off, after one warm-up of the model in eager;
- forward+backward time at steady state (benchmarks.BestTime, interleaved rounds), ratios to eager and stock;
- 10 SGD steps from the same weights: the last loss and the largest parameter difference against eager's;
- changing lengths (``LENGTHS``): three SGD steps with another batch size and sequence length each, as a data
  loader's last batch gives, compiled with automatic dynamic shapes (the second length recompiles with SymInt
  inputs), under eager, stock, the backend and the experimental flag (``predispatch_views.enable()`` around
  plain ``torch.compile``, whose stock is plain ``torch.compile``); each step's loss, outputs, grads, alias
  structure and ``add_(0)`` behaviour against eager's step. A crash is reported with the length it happened at,
  and a crash or difference of the prototype where its stock matches eager is marked prototype-only.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import csv
import math
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import _torch_internals as ti
from .benchmarks import BestTime, Settings
from .model_suite import CASES, ModelCase, PlainCase, step_shapes, suite_cases
from .strategies import Strategy, eager, prototype, slice_regen, stock, stock_no_fix
from .timing import benchmark_environment as _benchmark_environment
from .timing import fresh_copy

__all__ = ["CASES", "ModelCase", "PlainCase", "lengths_strategies", "model_cases", "run_lengths", "run_model"]

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
TRAIN_STEPS = 10
# (batch, sequence length) of the changing-lengths steps: a first shape, then others, as a loader's last batch.
LENGTHS: tuple[tuple[int, int], ...] = ((2, 16), (3, 11), (1, 7))


def model_cases(names: str | None = None) -> list[ModelCase | PlainCase]:
    """Every entry of the suite the install can build (model_suite.SUITE); ``names``: only those."""
    return suite_cases(names)


def model_strategies(
    inners: tuple[str, ...], flag_inner: str | None = None, alternatives: bool = True
) -> list[Strategy]:
    """eager; per inner stock, the alternatives (stock without the unsafe fix, slice regeneration) and the
    backend; then, with ``flag_inner``, plain ``torch.compile`` under the experimental flag (``flag[X]``) and,
    unless an inner's stock row is already that, plain ``torch.compile`` without it (``stock[X]``)."""
    out = [eager()]
    for inner in inners:
        out += [stock(inner), *((stock_no_fix(inner), slice_regen(inner)) if alternatives else ()), prototype(inner)]
    if flag_inner is not None:
        if flag_inner not in inners:
            out.append(plain_compile(flag_inner, flag=False))
        out.append(plain_compile(flag_inner, flag=True))
    return out


def reference_label(label: str) -> str | None:
    """The stock row a prototype row (the backend or the flag) is held to: a difference from eager where that
    stock matches eager is the prototype's own (a defect)."""
    for prefix in ("prototype[", "flag["):
        if label.startswith(prefix):
            return "stock[" + label[len(prefix) :]
    return None


@contextlib.contextmanager
def plain_compile_inner(inner: str) -> Iterator[None]:
    """Plain ``torch.compile`` (inductor's wrapper, the method the flag hooks) with another inner backend than
    inductor: ``compile_fx``, which the wrapper calls for each graph, becomes that backend while this is on. The
    flag then runs the prototype with that inner, and stock is that backend's plain compile."""
    if inner == "inductor":
        yield
        return
    import torch._inductor.compile_fx as compile_fx_module

    backend = ti.lookup_backend(inner)
    original = compile_fx_module.compile_fx

    def compile_fx(gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:  # config_patches...
        return backend(gm, example_inputs)

    compile_fx_module.compile_fx = compile_fx
    try:
        yield
    finally:
        compile_fx_module.compile_fx = original


def plain_compile_name(inner: str, flag: bool) -> str:
    """The ``name`` of a plain ``torch.compile`` row. fresh_copy gives each strategy its own top frame, but the
    frames Dynamo compiles after a graph break (a module's ``forward``) are shared; their cache entries are
    reused by any equal backend, and two inductor wrappers are equal unless their names differ. Without it the
    flag row would run the code stock compiled for those frames (the flag is read only when Dynamo compiles).
    The name is debug metadata: not in inductor's cache key, no effect on the compiled code."""
    return f"predispatch_views_{'flag' if flag else 'stock'}_{inner}"


def plain_compile(inner: str, flag: bool) -> Strategy:
    """Plain ``torch.compile(fn)`` with the flag on (``flag[inner]``) or off (``stock[inner]``), static shapes."""

    def make(fn: Callable[..., Any]) -> Callable[..., Any]:
        from .. import enable

        compiled = torch.compile(fn, dynamic=False, name=plain_compile_name(inner, flag))

        def run(*args: Any, **kwargs: Any) -> Any:
            # The flag is read when Dynamo compiles: on around every call, so that a recompile sees it too.
            with plain_compile_inner(inner), enable(flag):
                return compiled(*args, **kwargs)

        return run

    return Strategy("flag" if flag else "stock", inner, make)


# --- what a call returns ---------------------------------------------------------------------------------


def leaves(value: Any, depth: int = 0) -> Iterator[torch.Tensor]:
    """Every tensor a model call returns, in a fixed order: ModelOutput fields, tuples, cache objects' tensors."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):  # ModelOutput is an OrderedDict
        for v in value.values():
            yield from leaves(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v, depth + 1)
    elif depth < 6 and type(value).__module__.startswith("transformers") and hasattr(value, "__dict__"):
        for _, v in sorted(vars(value).items()):  # a Cache: its layers and their keys/values
            yield from leaves(v, depth + 1)


def loss_of(outputs: Any) -> torch.Tensor:
    terms = [t.float().square().mean() for t in leaves(outputs) if t.requires_grad and t.is_floating_point()]
    return torch.stack(terms).sum()


def alias_structure(tensors: list[torch.Tensor]) -> list[tuple[bool, int]]:
    """Per returned tensor: is it a view, and the first returned tensor it shares storage with."""
    first: dict[int, int] = {}
    out = []
    for i, t in enumerate(tensors):
        ptr = t.untyped_storage().data_ptr()
        out.append((t._is_view(), first.setdefault(ptr, i)))
    return out


def inplace_behaviour(tensors: list[torch.Tensor]) -> list[str]:
    out = []
    for t in tensors:
        try:
            t.add_(0)
            out.append("ok")
        except RuntimeError as e:
            out.append(f"RuntimeError: {(str(e).splitlines() or [''])[0]}")
    return out


# --- one model under every strategy ----------------------------------------------------------------------


@dataclass
class LengthResult:
    """One changing-lengths step of one strategy."""

    shape: tuple[int, int]  # (batch, sequence length)
    graphs: int = 0  # Dynamo graphs compiled during this step (a recompile after the first shape)
    symbolic_graphs: int = 0  # of those, graphs with symbolic sizes (SymInt inputs or sizes)
    fallbacks: list[str] = field(default_factory=list)  # prototype fallbacks logged during this step
    reasons: list[str] = field(default_factory=list)  # their reasons alone, in the same order
    outcomes: dict[str, int] = field(default_factory=dict)  # what became of the graphs (pipeline.GRAPHS)
    sliced: int = 0  # of the replayed graphs, those sliced from Dynamo's graph (Note [Slicing Dynamo's graph])
    seconds: float = math.nan  # wall time of the step (a compile or a recompile, when it had one)
    error: str = ""  # the step raised (the later lengths did not run)
    mismatches: list[str] = field(default_factory=list)  # what differs from eager's step: loss, outputs...
    prototype_only: list[str] = field(default_factory=list)  # crash or mismatches where its stock matches eager


@dataclass
class ModelRow:
    model: str
    strategy: str
    inner: str | None
    family: str = ""
    outputs_match: bool = False
    grads_match: bool = False
    n_tensors: int = 0
    views: int = 0
    views_eager: int = 0  # returned tensors that are views in eager
    views_kept: int = 0  # of those, views under this strategy too
    aliasing_as_eager: bool = False
    inplace_as_eager: int = 0  # returned tensors whose add_(0) behaves as eager's
    graphs: int = 0
    graph_breaks: int = 0
    fallbacks: list[str] = field(default_factory=list)
    fallback_reasons: list[str] = field(default_factory=list)  # the reasons of ``fallbacks``, same order
    outcomes: dict[str, int] = field(default_factory=dict)  # what became of its graphs (pipeline.GRAPHS)
    sliced: int = 0  # of the replayed graphs, those sliced from Dynamo's graph (Note [Slicing Dynamo's graph])
    compile_s: float = math.nan
    step_us: float = math.inf
    step_vs_eager: float = math.nan
    step_vs_stock: float = math.nan
    train_loss_rel_diff: float = math.nan
    train_param_max_diff: float = math.nan
    error: str = ""
    inplace_examples: list[str] = field(default_factory=list)  # where it differs: "i: eager -> strategy"
    lengths: list[LengthResult] = field(default_factory=list)  # the changing-lengths steps; empty: not run
    lengths_reference: str | None = None  # the stock row the prototype's lengths are judged against
    lengths_only: bool = False  # a row of the changing-lengths steps alone (the flag, plain torch.compile)
    lengths_planned: int = 0  # steps of the changing-lengths schedule
    defects: list[str] = field(default_factory=list)  # prototype-only differences or crashes (its stock matches)


@dataclass
class _Observed:
    tensors: list[torch.Tensor]
    grads: dict[str, torch.Tensor]
    alias: list[tuple[bool, int]]
    inplace: list[str]


def _observe(run: Callable[..., Any], model: torch.nn.Module, inputs: dict[str, Any]) -> _Observed:
    model.zero_grad(set_to_none=True)
    outputs = run(**inputs)
    tensors = [t.detach().clone() for t in leaves(outputs)]
    alias = alias_structure(list(leaves(outputs)))
    loss_of(outputs).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    inplace = inplace_behaviour(list(leaves(run(**inputs))))
    return _Observed(tensors, grads, alias, inplace)


def _close(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.allclose(x.float(), y.float(), **TOLERANCE) for x, y in zip(a, b)
    )


def _train(run: Callable[..., Any], model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = torch.tensor(math.nan)
    for _ in range(TRAIN_STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(run(**inputs))
        loss.backward()
        optimizer.step()
    return loss.item(), {n: p.detach().clone() for n, p in model.named_parameters()}


def run_model(
    case: ModelCase | PlainCase,
    strategies: list[Strategy],
    settings: Settings,
    *,
    warm_up: bool = True,
    lengths: Sequence[LengthsStrategy] = (),
    schedule: Sequence[tuple[int, int]] = LENGTHS,
) -> list[ModelRow]:
    """Every strategy at the first shape (probes, compile and step time, 10 steps), then the changing-lengths
    steps of ``lengths`` through ``schedule`` (after the timing: they reset Dynamo). Ends with
    ``find_defects``."""
    from .. import FALLBACKS, GRAPHS

    counters = torch._dynamo.utils.counters
    model, inputs = case.build()
    model.train()
    initial = copy.deepcopy(model.state_dict())
    loss_of(model(**inputs)).backward()  # one-time costs in eager (lazy inits, imports)
    first = next((s for s in strategies if s.inner is not None), None)
    if warm_up and first is not None:  # and Dynamo's first trace of the model's code, so no strategy pays it
        torch._dynamo.reset()
        loss_of(first.make(fresh_copy(lambda **kw: model(**kw)))(**inputs)).backward()
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    rows: list[ModelRow] = []
    live: list[tuple[ModelRow, Callable[[], Any]]] = []
    reference: _Observed | None = None
    reference_train: tuple[float, dict[str, Any]] | None = None
    for strategy in strategies:
        row = ModelRow(case.name, strategy.label, strategy.inner, case.family)
        rows.append(row)
        model.load_state_dict(initial)
        run = strategy.make(fresh_copy(lambda **kw: model(**kw)))
        counters.clear()
        FALLBACKS.clear()
        GRAPHS.clear()
        try:
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss_of(run(**inputs)).backward()
            row.compile_s = time.perf_counter() - start
            observed = _observe(run, model, inputs)
            row.graphs = int(counters["stats"]["unique_graphs"])
            row.graph_breaks = int(sum(counters["graph_break"].values()))
            row.fallbacks = [f"{graph}: {reason}" for graph, reason in dict.fromkeys(FALLBACKS)]
            row.fallback_reasons = [reason for _, reason in dict.fromkeys(FALLBACKS)]
            row.outcomes = dict(collections.Counter(outcome for _, outcome, _ in GRAPHS))
            row.sliced = _sliced(GRAPHS)
            model.load_state_dict(initial)
            trained = _train(run, model, inputs)
        except Exception as e:  # one broken strategy must not lose the table
            row.error = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
            continue
        finally:
            model.load_state_dict(initial)
        if reference is None or reference_train is None:
            reference, reference_train = observed, trained
        _compare(row, observed, trained, reference, reference_train)

        def step(run: Callable[..., Any] = run) -> None:
            loss_of(run(**inputs)).backward()

        live.append((row, step))
    timers = [(row, BestTime(step, settings)) for row, step in live]
    for _ in range(settings.rounds):
        for row, timer in timers:
            row.step_us = timer.round() * 1e6
    _ratios(rows)
    if lengths:
        run_lengths(case, model, initial, lengths, rows, schedule)
    find_defects(rows)
    return rows


def _compare(row: ModelRow, seen: _Observed, trained: Any, ref: _Observed, ref_trained: Any) -> None:
    row.n_tensors = len(seen.tensors)
    row.outputs_match = _close(seen.tensors, ref.tensors)
    row.grads_match = seen.grads.keys() == ref.grads.keys() and _close(
        [seen.grads[k] for k in ref.grads], list(ref.grads.values())
    )
    row.views = sum(is_view for is_view, _ in seen.alias)
    row.views_eager = sum(is_view for is_view, _ in ref.alias)
    row.views_kept = sum(a[0] and b[0] for a, b in zip(ref.alias, seen.alias))
    row.aliasing_as_eager = seen.alias == ref.alias
    row.inplace_as_eager = sum(a == b for a, b in zip(seen.inplace, ref.inplace))
    row.inplace_examples = [
        f"{i}: {a[:90]} -> {b[:90]}" for i, (a, b) in enumerate(zip(ref.inplace, seen.inplace)) if a != b
    ][:2]
    loss, params = trained
    ref_loss, ref_params = ref_trained
    row.train_loss_rel_diff = abs(loss - ref_loss) / max(abs(ref_loss), 1e-12)
    row.train_param_max_diff = max((params[k] - ref_params[k]).abs().max().item() for k in ref_params)


def _ratios(rows: list[ModelRow]) -> None:
    by_label = {r.strategy: r for r in rows if not r.error}
    eager_row = by_label.get("eager")
    for r in rows:
        if r.error:
            continue
        stock_row = by_label.get(f"stock[{r.inner}]")
        if eager_row is not None:
            r.step_vs_eager = r.step_us / eager_row.step_us
        if stock_row is not None:
            r.step_vs_stock = r.step_us / stock_row.step_us


# --- changing lengths ------------------------------------------------------------------------------------


class GraphRecorder:
    """Counts the Dynamo graphs a strategy compiles, and those with symbolic sizes (automatic dynamic)."""

    def __init__(self) -> None:
        self.graphs = 0
        self.symbolic_graphs = 0

    def note(self, gm: torch.fx.GraphModule) -> None:
        self.graphs += 1
        self.symbolic_graphs += _has_symbolic_sizes(gm)

    def wrap(self, backend: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
            self.note(gm)
            return backend(gm, example_inputs)

        return recorded


def _has_symbolic_sizes(gm: torch.fx.GraphModule) -> bool:
    for p in gm.graph.find_nodes(op="placeholder"):
        value = p.meta.get("example_value")
        if isinstance(value, torch.SymInt) or (
            isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape)
        ):
            return True
    return False


@contextlib.contextmanager
def _recording_plain_compile(recorder: GraphRecorder) -> Iterator[None]:
    """Note every graph plain ``torch.compile`` (inductor's wrapper) compiles, flag on or off."""
    from .. import enable

    with enable():  # installs the flag's hook first: it must stay the method wrapped here, not wrap this one
        pass
    wrapper_class = ti.inductor_wrapper_class()
    current = wrapper_class.__call__

    def __call__(self: Any, gm: torch.fx.GraphModule, example_inputs: Any, **kwargs: Any) -> Any:
        recorder.note(gm)
        return current(self, gm, example_inputs, **kwargs)

    wrapper_class.__call__ = __call__
    try:
        yield
    finally:
        wrapper_class.__call__ = current


@dataclass(frozen=True)
class LengthsStrategy:
    """How one strategy compiles the model for the changing-lengths steps: automatic dynamic shapes (Dynamo's
    default), so the second length recompiles with symbolic sizes."""

    label: str
    inner: str | None
    reference: str | None  # the stock strategy a prototype row is judged against
    make: Callable[[Callable[..., Any], GraphRecorder], Callable[..., Any]]


def _backend_strategy(label: str, inner: str, reference: str | None, backend: Callable[..., Any]) -> LengthsStrategy:
    return LengthsStrategy(
        label, inner, reference, lambda fn, recorder: torch.compile(fn, backend=recorder.wrap(backend), dynamic=None)
    )


def _plain_compile_strategy(label: str, reference: str | None, flag: bool, inner: str = "inductor") -> LengthsStrategy:
    def make(fn: Callable[..., Any], recorder: GraphRecorder) -> Callable[..., Any]:
        from .. import enable

        compiled = torch.compile(fn, dynamic=None, name=plain_compile_name(inner, flag))

        def run(**kwargs: Any) -> Any:
            # The flag is read when Dynamo compiles: every call, so that each recompile sees it.
            with _recording_plain_compile(recorder), plain_compile_inner(inner), enable(flag):
                return compiled(**kwargs)

        return run

    return LengthsStrategy(label, inner, reference, make)


def lengths_strategies(
    inners: tuple[str, ...], flag: bool = True, flag_inner: str = "inductor"
) -> list[LengthsStrategy]:
    """eager; stock and the backend per inner; plain ``torch.compile`` with the flag (inner ``flag_inner``) and,
    unless an inner's stock is already that, without it."""
    from .. import backend as prototype_backend

    out = [LengthsStrategy("eager", None, None, lambda fn, recorder: fn)]
    for inner in inners:
        out.append(_backend_strategy(f"stock[{inner}]", inner, None, ti.lookup_backend(inner)))
        out.append(_backend_strategy(f"prototype[{inner}]", inner, f"stock[{inner}]", prototype_backend(inner)))
    if flag:
        if flag_inner not in inners:
            out.append(_plain_compile_strategy(f"stock[{flag_inner}]", None, flag=False, inner=flag_inner))
        out.append(_plain_compile_strategy(f"flag[{flag_inner}]", f"stock[{flag_inner}]", flag=True, inner=flag_inner))
    return out


@dataclass
class _Step:
    loss: float
    observed: _Observed


def _error_text(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)  # BackendCompilerFailed: the backend's own exception
    text = f"{type(e).__name__}: {type(inner).__name__}: {inner}" if inner is not None else f"{type(e).__name__}: {e}"
    return " ".join(text.split())[:200]


def _run_lengths(
    case: ModelCase | PlainCase,
    model: torch.nn.Module,
    initial: dict[str, Any],
    strategy: LengthsStrategy,
    schedule: Sequence[tuple[int, int]] = LENGTHS,
) -> tuple[list[LengthResult], list[_Step]]:
    """One SGD step per shape of ``schedule``, from the initial weights, compiled afresh."""
    from .. import FALLBACKS, GRAPHS

    torch._dynamo.reset()  # also Dynamo's automatic-dynamic record, which is kept per code location
    model.load_state_dict(initial)
    recorder = GraphRecorder()
    run = strategy.make(fresh_copy(lambda **kw: model(**kw)), recorder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    results: list[LengthResult] = []
    steps: list[_Step] = []
    try:
        for shape in schedule:
            result = LengthResult(shape)
            results.append(result)
            inputs = case.inputs(*shape)
            graphs, symbolic = recorder.graphs, recorder.symbolic_graphs
            FALLBACKS.clear()
            GRAPHS.clear()
            start = time.perf_counter()
            try:
                optimizer.zero_grad(set_to_none=True)
                outputs = run(**inputs)
                tensors = [t.detach().clone() for t in leaves(outputs)]
                alias = alias_structure(list(leaves(outputs)))
                loss = loss_of(outputs)
                loss.backward()
                grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
                optimizer.step()
                result.seconds = time.perf_counter() - start
                inplace = inplace_behaviour(list(leaves(run(**inputs))))  # a fresh call: add_(0) on each
            except Exception as e:  # reported in the table, never hidden; the later lengths do not run
                result.error = _error_text(e)
                break
            finally:
                result.graphs = recorder.graphs - graphs
                result.symbolic_graphs = recorder.symbolic_graphs - symbolic
                result.fallbacks = [f"{graph}: {reason}" for graph, reason in dict.fromkeys(FALLBACKS)]
                result.reasons = [reason for _, reason in dict.fromkeys(FALLBACKS)]
                result.outcomes = dict(collections.Counter(outcome for _, outcome, _ in GRAPHS))
                result.sliced = _sliced(GRAPHS)
            steps.append(_Step(loss.item(), _Observed(tensors, grads, alias, inplace)))
    finally:
        model.load_state_dict(initial)
        torch._dynamo.reset()
    return results, steps


def _step_mismatches(seen: _Step, ref: _Step) -> list[str]:
    out = []
    if not math.isclose(seen.loss, ref.loss, rel_tol=TOLERANCE["rtol"], abs_tol=TOLERANCE["atol"]):
        out.append("loss")
    if not _close(seen.observed.tensors, ref.observed.tensors):
        out.append("outputs")
    if seen.observed.grads.keys() != ref.observed.grads.keys() or not _close(
        [seen.observed.grads[k] for k in ref.observed.grads], list(ref.observed.grads.values())
    ):
        out.append("grads")
    if seen.observed.alias != ref.observed.alias:
        out.append("aliasing")
    if seen.observed.inplace != ref.observed.inplace:
        out.append("add_(0)")
    return out


def run_lengths(
    case: ModelCase | PlainCase,
    model: torch.nn.Module,
    initial: dict[str, Any],
    strategies: Sequence[LengthsStrategy],
    rows: list[ModelRow],
    schedule: Sequence[tuple[int, int]] = LENGTHS,
) -> list[ModelRow]:
    """The changing-lengths steps of every strategy, judged against eager's steps (the first strategy): fills
    ``lengths`` of the rows with the same label, and adds rows for strategies the table has no row for."""
    by_label = {r.strategy: r for r in rows}
    steps: dict[str, list[_Step]] = {}
    for strategy in strategies:
        row = by_label.get(strategy.label)
        if row is None:
            row = ModelRow(case.name, strategy.label, strategy.inner, case.family, lengths_only=True)
            rows.append(row)
            by_label[strategy.label] = row
        row.lengths_reference = strategy.reference
        row.lengths_planned = len(schedule)
        row.lengths, steps[strategy.label] = _run_lengths(case, model, initial, strategy, schedule)
    reference = steps[strategies[0].label]
    for strategy in strategies[1:]:
        row = by_label[strategy.label]
        for i, (result, seen) in enumerate(zip(row.lengths, steps[strategy.label])):
            if i < len(reference):
                result.mismatches = _step_mismatches(seen, reference[i])
    for strategy in strategies:
        if strategy.reference is None or strategy.reference not in by_label:
            continue
        stock_row = by_label[strategy.reference]
        for i, result in enumerate(by_label[strategy.label].lengths):
            stock_result = stock_row.lengths[i] if i < len(stock_row.lengths) else None
            if stock_result is None or stock_result.error:
                continue  # stock crashed there too, or never got there: nothing to hold the prototype to
            if result.error:
                result.prototype_only = ["crash"]
            else:
                result.prototype_only = [m for m in result.mismatches if m not in stock_result.mismatches]
    return rows


# --- defects: the prototype differs where its stock does not -----------------------------------------------


def _first_shape_checks(r: ModelRow) -> dict[str, bool]:
    trained = r.train_loss_rel_diff <= TOLERANCE["rtol"] and r.train_param_max_diff <= TOLERANCE["atol"]
    return {
        "outputs": r.outputs_match,
        "grads": r.grads_match,
        "aliasing": r.aliasing_as_eager,
        "add_(0)": r.inplace_as_eager == r.n_tensors,
        "10 steps": trained,
    }


def find_defects(rows: list[ModelRow]) -> None:
    """Fill ``defects`` of every prototype row (backend and flag): a crash where its stock ran, or a check that
    fails where its stock's passes, at the first shape or at any step of the changing lengths."""
    by_label = {r.strategy: r for r in rows}
    for r in rows:
        stock_row = by_label.get(reference_label(r.strategy) or "")
        if stock_row is None:
            continue
        r.defects = []
        if not r.lengths_only and not stock_row.lengths_only and not stock_row.error:
            if r.error:
                r.defects.append(f"first shape: crash ({r.error})")
            else:
                stock_checks = _first_shape_checks(stock_row)
                failed = [k for k, ok in _first_shape_checks(r).items() if not ok and stock_checks[k]]
                if failed:
                    r.defects.append("first shape: " + "+".join(failed))
        for i, x in enumerate(r.lengths):
            if x.prototype_only:
                shape = f"{x.shape[0]}x{x.shape[1]}"
                what = f"crash ({x.error})" if x.error else "+".join(x.prototype_only)
                r.defects.append(f"step {i + 1} ({shape}): {what}")


# --- the section -----------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return "" if math.isnan(value) or math.isinf(value) else f"{value:.{digits}f}"


HEADER = (
    "model", "strategy", "outputs", "grads", "views (of tensors)", "views kept (of eager's)", "aliasing as eager",
    "add_(0) as eager", "graphs / breaks", "graph outcomes", "fallbacks", "compile (s)", "fwd+bwd (us)", "x eager",
    "x stock", "10 steps: loss rel. diff / max param diff", "steps run", "graphs over steps",
    "fallbacks over steps", "parity over steps", "steps time (s)",
)  # fmt: skip
N_LENGTH_COLUMNS = 5


def _yes(value: bool) -> str:
    return "yes" if value else "**no**"


def _sliced(graphs: Iterable[tuple[str, str, str]]) -> int:
    """Replayed graphs sliced from Dynamo's graph, without a pre-dispatch capture (outcomes.outcome's detail)."""
    return sum(what == "replayed" and detail.endswith("sliced from Dynamo's graph") for _, what, detail in graphs)


def outcome_text(outcomes: dict[str, int], sliced: int = 0) -> str:
    """``sliced``: of the replayed graphs, those sliced from Dynamo's graph (the others were captured)."""
    short = {"replayed": "replayed", "fallback": "fallback", "no view outputs": "no views", "compiled autograd": "ca"}
    return ", ".join(
        f"{short.get(k, k)} {v}" + (f" (sliced {sliced})" if k == "replayed" and sliced else "")
        for k, v in sorted(outcomes.items())
    )


def table_markdown(rows: list[ModelRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        if r.lengths_only:
            cells = [r.model, f"{r.strategy} (steps only)"] + [""] * (len(HEADER) - 2 - N_LENGTH_COLUMNS)
        elif r.error:
            cells = [r.model, r.strategy, f"error: {r.error}"] + [""] * (len(HEADER) - 3 - N_LENGTH_COLUMNS)
        else:
            prototype_row = reference_label(r.strategy) is not None
            cells = [
                r.model, r.strategy, _yes(r.outputs_match), _yes(r.grads_match), f"{r.views} ({r.n_tensors})",
                f"{r.views_kept} ({r.views_eager})", _yes(r.aliasing_as_eager), f"{r.inplace_as_eager}/{r.n_tensors}",
                "" if r.inner is None else f"{r.graphs} / {r.graph_breaks}", outcome_text(r.outcomes, r.sliced),
                "; ".join(r.fallbacks) or ("none" if prototype_row else ""),
                "" if r.inner is None else _f(r.compile_s), _f(r.step_us, 0), _f(r.step_vs_eager),
                _f(r.step_vs_stock),
                "" if r.inner is None else f"{r.train_loss_rel_diff:.1e} / {r.train_param_max_diff:.1e}",
            ]  # fmt: skip
        cells += length_cells(r)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def length_cells(r: ModelRow) -> list[str]:
    """steps run, graphs over steps, fallbacks over steps, parity over steps, steps time ("" where not run)."""
    if not r.lengths:
        return [""] * N_LENGTH_COLUMNS
    planned = r.lengths_planned or len(r.lengths)
    run = sum(not x.error for x in r.lengths)
    graphs = sum(x.graphs for x in r.lengths)
    symbolic = sum(x.symbolic_graphs for x in r.lengths)
    at = [str(i + 1) for i, x in enumerate(r.lengths) if x.graphs]
    if r.inner is None:
        parity = "reference"
    else:
        problems: dict[str, list[str]] = {}  # what differs -> the steps it differs at
        for i, x in enumerate(r.lengths):
            if x.error:
                what = "**crash (prototype-only)**" if x.prototype_only else "crash"
            else:
                what = "+".join(f"**{m} (prototype-only)**" if m in x.prototype_only else m for m in x.mismatches)
            if what:
                problems.setdefault(what, []).append(f"{i + 1} ({x.shape[0]}x{x.shape[1]})")
        ok = sum(not x.error and not x.mismatches for x in r.lengths)
        listed = [f"{what} at {', '.join(at) if len(at) < 4 else f'{len(at)} steps'}" for what, at in problems.items()]
        parity = f"ok {ok}/{planned}" + "".join(f"; {p}" for p in listed)
    seconds = sum(x.seconds for x in r.lengths if not math.isnan(x.seconds))
    return [
        f"{run}/{planned}",
        "" if r.inner is None else f"{graphs} ({symbolic} sym) at steps {','.join(at) or '-'}",
        "" if r.inner is None or r.lengths_reference is None else str(sum(len(x.fallbacks) for x in r.lengths)),
        parity,
        _f(seconds, 1),
    ]


def lengths_notes(rows: list[ModelRow]) -> str:
    """Every crash and fallback of the changing-lengths steps, with the step and shape it happened at."""
    notes = []
    for r in rows:
        for i, x in enumerate(r.lengths):
            shape = f"step {i + 1} ({x.shape[0]}x{x.shape[1]})"
            if x.error:
                tag = " **(prototype-only crash: its stock ran this step)**" if x.prototype_only else ""
                notes.append(f"- {r.model} / {r.strategy} at {shape}: crashed{tag}: {x.error}")
            notes += [f"- {r.model} / {r.strategy} at {shape}: fallback: {f[:240]}" for f in x.fallbacks]
    if not notes:
        return ""
    return "Training steps: crashes and fallbacks (batch x length):\n\n" + "\n".join(notes)


def lengths_summary(rows: list[ModelRow]) -> list[str]:
    """One line per model and prototype strategy: steps run, parity, crashes, fallbacks, defects."""
    out = []
    for r in rows:
        if not r.lengths or r.lengths_reference is None:
            continue
        cells = length_cells(r)
        out.append(
            f"{r.model} {r.strategy}: {cells[0]} steps, parity {cells[3].replace('**', '')}, "
            f"fallbacks {cells[2]}, defects {r.defects or 'none'}"
        )
    return out


# --- per model, and the fallbacks real code hits ------------------------------------------------------------


SUMMARY_HEADER = (
    "model", "family", "graphs / breaks", "graph outcomes", "views: eager / kept", "parity at first shape",
    "steps ok", "fallbacks (reasons)", "step time x stock", "compile x stock", "steps time x stock", "defects",
)  # fmt: skip


def _ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b)) else math.nan


def _steps_seconds(r: ModelRow) -> float:
    return sum(x.seconds for x in r.lengths) if r.lengths and all(not x.error for x in r.lengths) else math.nan


def summary_markdown(rows: list[ModelRow]) -> str:
    """One line per model: its prototype rows (backend and flag, ``label: value`` where there are several)."""
    lines = ["| " + " | ".join(SUMMARY_HEADER) + " |", "|" + "---|" * len(SUMMARY_HEADER)]
    for model in dict.fromkeys(r.model for r in rows):
        mine = [r for r in rows if r.model == model]
        by_label = {r.strategy: r for r in mine}
        ours = [r for r in mine if reference_label(r.strategy) is not None]

        def each(value: Callable[[ModelRow], str], rs: list[ModelRow] = ours) -> str:
            texts = [value(r) for r in rs]
            if len(set(texts)) == 1 and len(rs) > 1:
                return texts[0]
            return "; ".join(f"{r.strategy}: {t}" for r, t in zip(rs, texts)) if len(rs) > 1 else "".join(texts)

        def stock_of(r: ModelRow, by_label: dict[str, ModelRow] = by_label) -> ModelRow:
            return by_label.get(reference_label(r.strategy) or "", r)

        def parity(r: ModelRow) -> str:
            if r.lengths_only:
                return "-"
            if r.error:
                return f"crash: {r.error[:80]}"
            failed = [k for k, ok in _first_shape_checks(r).items() if not ok]
            return "ok" if not failed else "differs: " + "+".join(failed)

        def steps(r: ModelRow) -> str:
            if not r.lengths:
                return "-"
            ok = sum(not x.error and not x.mismatches for x in r.lengths)
            return f"{ok}/{r.lengths_planned or len(r.lengths)}"

        def fallbacks(r: ModelRow) -> str:
            reasons = collections.Counter([*r.fallback_reasons, *(y for x in r.lengths for y in x.reasons)])
            return ", ".join(f"{fallback_kind(k)} x{n}" for k, n in reasons.most_common()) or "none"

        def graph_outcomes(r: ModelRow) -> str:
            total: collections.Counter[str] = collections.Counter(r.outcomes)
            for x in r.lengths:
                total.update(x.outcomes)
            return outcome_text(dict(total), r.sliced + sum(x.sliced for x in r.lengths)) or "-"

        eager_row = by_label.get("eager")
        compared = list({r.strategy: r for r in [*ours, *map(stock_of, ours)]}.values())
        views = f"{eager_row.views_eager if eager_row else '?'} / " + each(
            lambda r: "-" if r.lengths_only or r.error else str(r.views_kept), compared
        )
        cells = [
            model, mine[0].family,
            each(lambda r: "-" if r.lengths_only else f"{r.graphs} / {r.graph_breaks}"), each(graph_outcomes),
            views, each(parity), each(steps), each(fallbacks),
            each(lambda r: _f(r.step_vs_stock)), each(lambda r: _f(_ratio(r.compile_s, stock_of(r).compile_s))),
            each(lambda r: _f(_ratio(_steps_seconds(r), _steps_seconds(stock_of(r))))),
            "; ".join(f"{r.strategy}: {d}" for r in ours for d in r.defects) or "none",
        ]  # fmt: skip
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def fallback_kind(reason: str) -> str:
    """The fallbacks.py entry a logged reason belongs to (its marker is in the message), or ``other``."""
    from ..fallbacks import FallbackKind

    for kind in FallbackKind:
        if kind.value.marker in reason:
            return kind.name
    return "other"


def fallback_table(rows: list[ModelRow]) -> str:
    """The fallbacks the suite's models hit, by kind: how many models, which, under which strategies, how many
    graphs, and one message as logged."""
    models: dict[str, set[str]] = collections.defaultdict(set)
    strategies: dict[str, set[str]] = collections.defaultdict(set)
    graphs: collections.Counter[str] = collections.Counter()
    example: dict[str, str] = {}
    for r in rows:
        for reason in [*r.fallback_reasons, *(y for x in r.lengths for y in x.reasons)]:
            kind = fallback_kind(reason)
            models[kind].add(r.model)
            strategies[kind].add(r.strategy)
            graphs[kind] += 1
            example.setdefault(kind, reason)
    n_models = len({r.model for r in rows})
    if not graphs:
        return f"No prototype fallback in the {n_models} models run."
    header = "| fallback (fallbacks.py) | models | which | strategies | fallbacks logged | message (first seen) |"
    lines = [header, "|---|---|---|---|---|---|"]
    for kind in sorted(graphs, key=lambda k: (-len(models[k]), k)):
        message = " ".join(example[kind].split())[:300].replace("|", "\\|")
        lines.append(
            f"| {kind} | {len(models[kind])} of {n_models} | {', '.join(sorted(models[kind]))} | "
            f"{', '.join(sorted(strategies[kind]))} | {graphs[kind]} | {message} |"
        )
    return "\n".join(lines)


CSV_FIELDS = (
    "model", "family", "strategy", "inner", "error", "outputs_match", "grads_match", "n_tensors", "views",
    "views_eager", "views_kept", "aliasing_as_eager", "inplace_as_eager", "graphs", "graph_breaks", "compile_s",
    "step_us", "step_vs_eager", "step_vs_stock", "train_loss_rel_diff", "train_param_max_diff",
)  # fmt: skip


def write_csv(rows: list[ModelRow], path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [*CSV_FIELDS, "outcomes", "fallbacks", "steps_run", "steps_planned", "steps_ok", "steps_graphs",
             "steps_symbolic_graphs", "steps_fallbacks", "steps_seconds", "defects"]
        )  # fmt: skip
        for r in rows:
            reasons = [*r.fallback_reasons, *(y for x in r.lengths for y in x.reasons)]
            writer.writerow(
                [getattr(r, name) for name in CSV_FIELDS]
                + [
                    outcome_text(r.outcomes, r.sliced), "; ".join(fallback_kind(x) for x in reasons),
                    sum(not x.error for x in r.lengths), r.lengths_planned,
                    sum(not x.error and not x.mismatches for x in r.lengths), sum(x.graphs for x in r.lengths),
                    sum(x.symbolic_graphs for x in r.lengths), sum(len(x.reasons) for x in r.lengths),
                    _f(_steps_seconds(r), 3), "; ".join(r.defects),
                ]
            )  # fmt: skip


def inplace_notes(rows: list[ModelRow]) -> str:
    notes = [f"- {r.model} / {r.strategy}: {e}" for r in rows for e in r.inplace_examples]
    if not notes:
        return ""
    return "Returned tensors whose `add_(0)` differs from eager (first two per row; eager -> strategy):\n\n" + (
        "\n".join(notes)
    )


def model_settings(args: argparse.Namespace) -> Settings:
    # aot_eager unless --models-inner says otherwise (none: no backend rows, the flag's alone): inductor adds
    # minutes of gcc per model.
    text = getattr(args, "models_inner", None) or "aot_eager"
    inners = () if text == "none" else tuple(i.strip() for i in text.split(",") if i.strip())
    return Settings(
        device=torch.device("cpu"), inners=inners, quick=True, min_run_time=0.05, rounds=3, step_cap_s=math.inf,
        budget_s=1.0,
    )  # fmt: skip


def _flag_inner(args: argparse.Namespace) -> str | None:
    text = getattr(args, "models_flag_inner", None) or "inductor"
    return None if text == "none" else text


def render_models(rows: list[ModelRow], settings: Settings, flag_inner: str | None, schedule: Sequence[tuple[int, int]],
            alternatives: bool, elapsed: float, complete: bool) -> tuple[str, str]:  # fmt: skip
    """The section (models.md) and the fallback table (fallbacks.md)."""
    import transformers

    shapes = ", ".join(f"{b}x{n}" for b, n in schedule)
    n_models = len({r.model for r in rows})
    defects = [f"- {r.model} / {r.strategy}: {d}" for r in rows for d in r.defects]
    strategies = "eager, then per inner backend (" + (", ".join(settings.inners) or "none") + ") stock"
    strategies += (", stock without the unsafe fix, slice regeneration" if alternatives else "") + " and the backend"
    if flag_inner is not None:
        strategies += (
            f"; plain `torch.compile` under the experimental flag with inner {flag_inner} (flag[{flag_inner}]) "
            f"against plain `torch.compile` (stock[{flag_inner}]"
            + (", compile_fx replaced by that backend" if flag_inner != "inductor" else "")
            + ")"
        )
    fallbacks = fallback_table(rows)
    parts = [
        "## Real models",
        f"{n_models} models (model_suite.SUITE), transformers {transformers.__version__}, torch "
        f"{torch.__version__}, CPU, one thread. Strategies: {strategies}. Tiny configs built in code (2 layers, "
        "hidden 32, vocab 128, random weights, dropout, layer drop and drop path 0; decoders called with "
        "`use_cache=True` unless named `_nocache`; `_gc`: activation checkpointing on).",
        "First shape (batch 2 x 8): outputs and grads allclose to eager (rtol "
        f"{TOLERANCE['rtol']}, atol {TOLERANCE['atol']}) over every returned tensor, caches included, and every "
        "parameter's grad (loss: mean of squares of each floating output). Views kept: returned tensors that are "
        "views in eager and under the strategy. Aliasing as eager: same views and same storage sharing. "
        "`add_(0)` as eager: returned tensors of a fresh call whose in-place add raises (same message) or not as "
        "in eager. Graphs / breaks: Dynamo's counters; graph outcomes: what the prototype made of each graph "
        "(`predispatch_views.GRAPHS`). Compile: wall time of the first forward+backward, caches off. fwd+bwd: best "
        f"block over {settings.rounds} interleaved rounds (process CPU time). 10 steps: SGD lr 0.05 at the first "
        "shape, last loss and parameters against eager's.",
        f"Training steps: from the same weights, {len(schedule)} SGD steps (lr 0.05) through the shapes {shapes} "
        "(batch x length; vision: the batch changes, the image size is the config's), compiled afresh with "
        "Dynamo's automatic dynamic shapes (`sym`: graphs with symbolic sizes). Per step, against eager's step: "
        "loss, every returned tensor, every parameter's grad, alias structure and `add_(0)` of a fresh call. "
        "Steps time: wall time of the steps (compiles and recompiles included). A crash or difference of a "
        "prototype row (backend or flag) where its stock (same inner) matches eager is prototype-only: a defect.",
        "### Per model\n\n" + summary_markdown(rows),
        "### Defects (prototype-only differences or crashes)\n\n" + ("\n".join(defects) or "None."),
        "### Fallbacks real code hits\n\n" + fallbacks,
        "### Every strategy\n\n" + table_markdown(rows),
        lengths_notes(rows),
        inplace_notes(rows),
        f"_Models section: {elapsed:.0f} s{'' if complete else ' (incomplete: still running or stopped)'}._",
    ]
    fallbacks_md = (
        "# Fallbacks real code hits\n\nGenerated by `python -m predispatch_views compare --models` from "
        f"{n_models} models (inner {', '.join(settings.inners) or 'none'}, flag inner {flag_inner}): every "
        "fallback the backend or the flag logged at the first shape and over the training steps, by its entry "
        "in predispatch_views/fallbacks.py.\n\n" + fallbacks + "\n"
    )
    return "\n\n".join(p for p in parts if p) + "\n", fallbacks_md


def run_models_section(args: argparse.Namespace, out_dir: Path) -> str:
    try:
        import transformers
    except ImportError:
        return '## Real models\n\nSkipped: transformers is not installed (`pip install -e ".[models]"`).\n'
    transformers.logging.set_verbosity_error()
    settings = model_settings(args)
    flag_inner = _flag_inner(args)
    alternatives = bool(getattr(args, "models_alternatives", False))
    schedule = step_shapes(int(getattr(args, "models_steps", 10) or 10))
    only = getattr(args, "models_only", None)
    wanted = getattr(args, "cases", None)
    cases = [c for c in model_cases(only) if only or not wanted or wanted in c.name]
    strategies = model_strategies(settings.inners, flag_inner, alternatives)
    lengths = lengths_strategies(settings.inners, flag=flag_inner is not None, flag_inner=flag_inner or "inductor")
    start = time.perf_counter()
    rows: list[ModelRow] = []
    out_dir = Path(out_dir)

    def write(complete: bool) -> str:
        text, fallbacks_md = render_models(
            rows, settings, flag_inner, schedule, alternatives, time.perf_counter() - start, complete
        )
        (out_dir / "models.md").write_text(text)
        (out_dir / "fallbacks.md").write_text(fallbacks_md)
        write_csv(rows, out_dir / "models.csv")
        with (out_dir / "models_rows.pkl").open("wb") as f:  # to render the tables again without a rerun
            pickle.dump(rows, f)
        return text

    with _benchmark_environment():
        for case in cases:
            started = time.perf_counter()
            try:
                model_rows = run_model(case, strategies, settings, lengths=lengths, schedule=schedule)
            except Exception as e:  # the build or eager itself failed: a row says so, the other models run
                model_rows = [ModelRow(case.name, "eager", None, case.family, error=_error_text(e))]
            rows += model_rows
            print(f"  model {case.name}: {time.perf_counter() - started:.0f} s", flush=True)
            for line in lengths_summary(model_rows):
                print(f"    {line}", flush=True)
            write(complete=False)  # what is measured survives a crash of the process or a stop
        torch._dynamo.reset()
    text = write(complete=True)
    print(text)
    return text
