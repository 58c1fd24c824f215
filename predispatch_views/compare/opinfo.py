"""PyTorch's OpInfo database as an oracle: every op with aliasing or in-place behaviour, under every entry point.

``python -m predispatch_views compare --opinfo [--opinfo-ops TEXT] [--opinfo-samples N] [--seed S] [--jobs J]``
takes the ops of ``torch.testing._internal.common_methods_invocations.op_db`` (shipped with torch) that alias
or write:

- view ops: a return of some overload of the op's aten schema has an alias annotation, or (checked on the
  samples, in eager) an output shares storage with an input (``x.float()`` returning ``x``, ``atleast_1d``...);
  ``multi_output_view`` when several outputs of one call do (unbind, split, chunk, tensor_split, hsplit...);
- ops with an ``inplace_variant``;
- ops with ``supports_out``.

Each op's first N sample inputs (float32, CPU, ``requires_grad`` where the op supports autograd; generated
under ``--seed``) become small programs that make the behaviour observable (``PROGRAM_KINDS``): the op on the
inputs themselves and on an intermediate (``x.mul(1)``: its outputs are views of an intermediate, the case the
project is about), the intermediate written after the views were taken, the in-place variant on an intermediate,
on a multi-output view of one and on an input, the ``out=`` variant into a fresh buffer and into an input.

Each program runs under eager, stock (``torch.compile(fn, backend=inner)``), the prototype backend
(``torch.compile(fn, backend=predispatch_views.backend(inner))``) and ``compile_function(fn, inner)``, in every
``Setting``: ``dynamic=False`` and ``dynamic=True`` (compile_function has no dynamic mode: static only), grad
mode on and off (off: the compiled function is called under ``torch.no_grad()``). Each run is observed by the
fuzzer's probes (fuzz.FUZZ_PROBES: the parity suite's values, grads, view relations, grad_fns, errors after
in-place writes, version counters, plus grad mode after the call and version-counter sharing) and classified
against eager under the same grad mode by fuzz.classify: match, divergence, crash, or fallback (the prototype
logged a fallback). The invariant is the fuzzer's (fuzz.violated_rule): a prototype-only defect is a run where
a prototype entry point diverges or crashes while stock, in the same setting, matches eager, or crashes where
stock runs. Each defect is run again (fuzz.failure_predicate) to confirm it is deterministic.

With ``--jobs J`` the ops run in J worker processes (``python -m predispatch_views.compare.opinfo``); a worker
that dies (torch crashing the interpreter) is restarted after the program it was running, and that program is
run again one strategy per process, so the death is attributed to the strategy whose process dies.
"""

from __future__ import annotations

import argparse
import collections
import csv
import json
import linecache
import math
import random
import re
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from ..backend import backend as prototype_backend
from ..compile_function import compile_function
from .cases import Case, Inputs
from .fuzz import (
    CRASH_WHERE_STOCK_RUNS,
    WRONG_WHERE_STOCK_MATCHES,
    Outcome,
    Run,
    StrategyResult,
    classify,
    failure_predicate,
    run_program,
    violated_rule,
    wrong_on_a_probe,
)
from .probes import Raised, attempt, describe
from .strategies import Strategy

DEFAULT_SAMPLES = 1
DEFAULT_INNER = "aot_eager"
DTYPE = torch.float32
# Multi-output views (unbind, split, chunk...) are what the project is about: they get at least this many samples.
MULTI_OUTPUT_SAMPLES = 4
# Samples bigger than this (elements over all tensors) are skipped: the probes copy every tensor many times.
MAX_SAMPLE_NUMEL = 20_000

# ---------------------------------------------------------------------------------------------------------
# Settings and strategies.
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    dynamic: bool
    grad: bool

    @property
    def label(self) -> str:
        return f"{'dynamic' if self.dynamic else 'static'}/{'grad' if self.grad else 'no_grad'}"


SETTINGS = (Setting(False, True), Setting(False, False), Setting(True, True), Setting(True, False))

# The entry points under test, and the stock strategy each is held against in the same setting.
STOCK = "stock"
PROTOTYPE = "prototype"
PROTOTYPE_FN = "prototype_fn"
ENTRY_POINTS = (STOCK, PROTOTYPE, PROTOTYPE_FN)


def _under_grad_mode(fn: Callable[..., Any], grad: bool) -> Callable[..., Any]:
    """Grad mode off: the user calls the (compiled) function under no_grad, as inference code does."""
    if grad:
        return fn

    def run(*args: Any) -> Any:
        with torch.no_grad():
            return fn(*args)

    return run


def eager_strategy(grad: bool) -> Strategy:
    return Strategy("eager", None, lambda fn: _under_grad_mode(fn, grad))


def entry_strategy(name: str, inner: str, setting: Setting) -> Strategy:
    """One entry point in one setting; the same ``Strategy`` as the parity suite's, with dynamic and grad mode."""
    if name not in ENTRY_POINTS:
        raise KeyError(name)
    if name == PROTOTYPE_FN and setting.dynamic:
        raise ValueError("compile_function has no dynamic mode")

    def make(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name == PROTOTYPE_FN:
            compiled = compile_function(fn, inner)
        else:
            backend = inner if name == STOCK else prototype_backend(inner)
            compiled = torch.compile(fn, backend=backend, dynamic=setting.dynamic)
        return _under_grad_mode(compiled, setting.grad)

    return Strategy(name, inner, make)


def entry_points(setting: Setting) -> tuple[str, ...]:
    return (STOCK, PROTOTYPE) if setting.dynamic else ENTRY_POINTS


# ---------------------------------------------------------------------------------------------------------
# Selecting ops.
# ---------------------------------------------------------------------------------------------------------


def load_op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def schema_aliases(op: Any) -> bool:
    """Some overload of the op's aten function returns an alias of an input (``Tensor(a)``, not written)."""
    packet = getattr(torch.ops.aten, (op.aten_name or op.name).split(".")[0], None)
    if packet is None:
        return False
    for overload in packet.overloads():
        returns = getattr(packet, overload)._schema.returns
        if any(r.alias_info is not None and not r.alias_info.is_write for r in returns):
            return True
    return False


@dataclass
class SelectedOp:
    op: Any
    kinds: set[str]  # view, multi_output_view, inplace, out

    @property
    def name(self) -> str:
        return op_name(self.op)


@dataclass(frozen=True)
class Sample:
    """One OpInfo sample as source text: its tensors become the program's arguments ``t0, t1, ...``; every other
    value (ints, lists of ints, dtypes, Sizes...) is a constant ``c0, c1, ...`` of the program's namespace, so
    nothing but the op call is traced (no harness code in the graph)."""

    index: int
    tensors: tuple[torch.Tensor, ...]
    input_code: str  # the sample's ``input``: ``t0``, or a list of tensors ``[t0, t1]``
    input_tensors: tuple[str, ...]  # the names in input_code
    call_code: str  # ``, args..., kw=...`` after the input
    constants: dict[str, Any]
    text: str

    def fresh(self, requires_grad: bool) -> tuple[torch.Tensor, ...]:
        return tuple(
            t.detach().clone().requires_grad_(requires_grad and t.requires_grad and t.is_floating_point())
            for t in self.tensors
        )


class _SourceBuilder:
    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.constants: dict[str, Any] = {}

    def expr(self, value: Any) -> str:
        if isinstance(value, torch.Tensor):
            self.tensors.append(value.detach().clone().requires_grad_(value.requires_grad))
            return f"t{len(self.tensors) - 1}"
        if type(value) in (list, tuple):
            items = [self.expr(v) for v in value]
            return f"[{', '.join(items)}]" if isinstance(value, list) else f"({''.join(i + ', ' for i in items)})"
        if value is None or type(value) in (bool, int) or (type(value) is float and math.isfinite(value)):
            return repr(value)
        name = f"c{len(self.constants)}"
        self.constants[name] = value
        return name


def _shape_text(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return f"Tensor{list(value.shape)}:{str(value.dtype).removeprefix('torch.')}"
    return value


def make_sample(index: int, sample: Any) -> Sample:
    b = _SourceBuilder()
    input_code = b.expr(sample.input)
    input_tensors = tuple(f"t{k}" for k in range(len(b.tensors)))
    call = "".join(f", {b.expr(a)}" for a in sample.args)
    call += "".join(f", {k}={b.expr(v)}" for k, v in sample.kwargs.items())
    shown = pytree.tree_map(_shape_text, (sample.input, tuple(sample.args), dict(sample.kwargs)))
    text = f"input={shown[0]} args={shown[1]} kwargs={shown[2]}"
    return Sample(index, tuple(b.tensors), input_code, input_tensors, call, b.constants, text)


def sample_inputs(op: Any, seed: int, limit: int, requires_grad: bool = True) -> list[Sample]:
    """The op's first ``limit`` float32 CPU samples (seeded), small enough for the probes."""
    torch.manual_seed(seed)
    random.seed(seed)
    out: list[Sample] = []
    grad = requires_grad and op.supports_autograd
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(op.sample_inputs("cpu", DTYPE, requires_grad=grad)):
            made = make_sample(index, sample)
            if sum(t.numel() for t in made.tensors) > MAX_SAMPLE_NUMEL:
                continue
            out.append(made)
            if len(out) >= limit:
                break
    return out


def _storages(value: Any) -> set[StorageWeakRef]:
    return {
        StorageWeakRef(t.untyped_storage())
        for t in pytree.tree_leaves(value)
        if isinstance(t, torch.Tensor) and t.layout == torch.strided
    }


def eager_aliasing(op: Any, samples: Sequence[Sample]) -> tuple[bool, bool]:
    """(some output shares storage with an input, several outputs of one call do), on the samples in eager."""
    aliases = multi = False
    for s in samples:
        tensors = s.fresh(False)
        out = attempt(lambda s=s, tensors=tensors: build_function(op, s, "direct")(*tensors))
        if isinstance(out, Raised):
            continue
        inputs = _storages(tensors)
        outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        aliasing = [t for t in outputs if t.layout == torch.strided and _storages(t) & inputs]
        aliases |= bool(aliasing)
        multi |= isinstance(out, (tuple, list)) and len(aliasing) > 1
    return aliases, multi


def select_ops(
    pattern: str | None = None, seed: int = 0, limit: int = DEFAULT_SAMPLES, exact: bool = False
) -> list[tuple[SelectedOp, list[Sample]]]:
    """Every op of op_db that aliases or writes (and whose name contains one of ``pattern``'s comma-separated
    parts, or is one of them with ``exact``), with its samples. Ops without float32 on the CPU are left out."""
    parts = [p.strip() for p in (pattern or "").split(",") if p.strip()]
    selected = []
    for op in load_op_db():
        name = op_name(op)
        if parts and not any(p == name if exact else p in name for p in parts):
            continue
        if DTYPE not in op.supported_dtypes("cpu"):
            continue
        kinds: set[str] = set()
        if op.inplace_variant is not None:
            kinds.add("inplace")
        if op.supports_out:
            kinds.add("out")
        samples = sample_inputs(op, seed, max(limit, MULTI_OUTPUT_SAMPLES))
        if not samples:
            continue
        aliases, multi = eager_aliasing(op, samples)
        if not multi:
            samples = samples[:limit]
        if aliases or schema_aliases(op):
            kinds.add("view")
        if multi:
            kinds.add("multi_output_view")
        if kinds:
            selected.append((SelectedOp(op, kinds), samples))
    return selected


# ---------------------------------------------------------------------------------------------------------
# Programs.
# ---------------------------------------------------------------------------------------------------------

# What each kind of op gets, in this order.
PROGRAM_KINDS = {
    "view": ("direct", "intermediate", "write_base_after"),
    "inplace": ("inplace_intermediate", "inplace_view", "inplace_input"),
    "out": ("out_fresh", "out_input"),
}


# Kinds whose inputs do not require grad (OpProgram.requires_grad); out_fresh keeps them, for eager's error.
NO_GRAD_INPUTS = ("inplace_input", "out_input")


def _views_of(name: str, t: torch.Tensor) -> str:
    """Views of a written value to return next to it: the multi-output kind the project is about."""
    return f"*{name}.unbind(0)" if t.dim() > 0 and 0 < t.shape[0] <= 8 else f"{name}.unsqueeze(0)"


def _touch(code: str, s: Sample) -> str:
    # Each input tensor name becomes name.mul(1): the op then runs on intermediates.
    out = code
    for name in sorted(s.input_tensors, key=len, reverse=True):
        out = re.sub(rf"\b{name}\b", f"{name}.mul(1)", out)
    return out


def program_source(s: Sample, kind: str, buffers: int = 0) -> str | None:
    """The program's body as Python source (``OP``, ``INPLACE``: the op's variants), or None where the kind does
    not apply to this sample."""
    args = [f"t{k}" for k in range(len(s.tensors))] + [f"o{k}" for k in range(buffers)]
    single = s.input_code == "t0"
    first = s.tensors[0] if s.tensors else None
    lines: list[str]
    if kind == "direct":
        lines = [f"return OP({s.input_code}{s.call_code})"]
    elif kind == "intermediate":
        if not s.input_tensors:
            return None
        lines = [f"base = {_touch(s.input_code, s)}", f"return OP(base{s.call_code})"]
    elif kind == "write_base_after":
        if not s.input_tensors:
            return None
        lines = [f"base = {_touch(s.input_code, s)}", f"out = OP(base{s.call_code})"]
        # The outputs that are views see the write; their grad_fns are regenerated.
        lines += ["base.add_(1)"] if single else [f"base[{k}].add_(1)" for k in range(len(s.input_tensors))]
        lines.append("return out")
    elif kind in ("inplace_intermediate", "inplace_view", "inplace_input"):
        if not single or first is None:
            return None
        if kind == "inplace_intermediate":
            lines = [
                "base = t0.mul(1)",
                f"out = INPLACE(base{s.call_code})",
                f"return (out, {_views_of('base', first)})",
            ]
        elif kind == "inplace_view":
            if first.dim() == 0 or first.shape[0] == 0:
                return None
            # A multi-output view covering the whole base: eager refuses the write when the base requires grad.
            lines = [
                "base = t0.mul(1)",
                "(view,) = base.split(base.shape[0])",
                f"out = INPLACE(view{s.call_code})",
                "return (base, view, out)",
            ]
        else:
            lines = [f"out = INPLACE(t0{s.call_code})", f"return (out, {_views_of('t0', first)})"]
    elif kind == "out_fresh":
        lines = [f"buffer = {'BUFFERS()'}", f"OP({s.input_code}{s.call_code}, out=buffer)", "return buffer"]
    elif kind == "out_input":
        out = "o0" if buffers == 1 else "(" + "".join(f"o{k}, " for k in range(buffers)) + ")"
        lines = [f"OP({s.input_code}{s.call_code}, out={out})", "return (o0, o0.unsqueeze(0))"]
    else:
        raise KeyError(kind)
    return f"def program({', '.join(args)}):\n" + "".join(f"    {line}\n" for line in lines)


def build_function(op: Any, s: Sample, kind: str, example: Any = None) -> Callable[..., Any]:
    """Exec the program's source with the sample's constants and the op's variants in its namespace."""
    buffers = 0 if example is None or kind != "out_input" else len(_outputs(example))
    source = program_source(s, kind, buffers)
    if source is None:
        raise ValueError(f"{kind} does not apply to this sample")
    namespace: dict[str, Any] = {"torch": torch, "OP": op.op, "INPLACE": op.inplace_variant, **s.constants}
    if kind == "out_fresh":
        shapes = [(t.shape, t.dtype) for t in _outputs(example)]
        single = isinstance(example, torch.Tensor)
        namespace["BUFFERS"] = (
            (lambda: torch.zeros(shapes[0][0], dtype=shapes[0][1]))
            if single
            else (lambda: tuple(torch.zeros(shape, dtype=dtype) for shape, dtype in shapes))
        )
    filename = f"<opinfo {op_name(op)} s{s.index} {kind}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace["program"]
    fn.opinfo_source = source
    return fn


def _outputs(example: Any) -> list[torch.Tensor]:
    return [example] if isinstance(example, torch.Tensor) else list(example)


@dataclass
class OpProgram:
    """One program of one sample of one op; ``case()`` is what fuzz.run_program runs."""

    op: str
    sample: Sample
    kind: str
    fn: Callable[..., Any]
    buffers: tuple[torch.Tensor, ...] = ()  # out_input: the out= buffers, passed as the last arguments
    # Whether the sample's float tensors require grad. A write into an input that requires grad (or out= on one)
    # raises in eager under grad mode, so those kinds get inputs that do not: the write itself is then observed.
    requires_grad: bool = True

    @property
    def name(self) -> str:
        return f"{self.op}/s{self.sample.index}/{self.kind}"

    @property
    def source(self) -> str:
        constants = "".join(f"# {k} = {v!r}\n" for k, v in self.sample.constants.items())
        return constants + self.fn.opinfo_source  # type: ignore[attr-defined]

    # What fuzz.run_program reads of a program besides case(): one call, in the caller's grad mode (the settings'
    # no_grad is applied by the strategies, eager's included).
    call_mode = ""

    @property
    def call_params(self) -> list[dict[str, int]]:
        return [{}]

    def cases(self) -> list[Case]:
        return [self.case()]

    def case(self) -> Case:
        def factory(gen: torch.Generator, device: str) -> Inputs:
            if device != "cpu":
                raise NotImplementedError("OpInfo programs build their inputs on the CPU")
            args = self.sample.fresh(self.requires_grad) + tuple(b.clone() for b in self.buffers)
            return Inputs(args, tuple(a for a in args if a.requires_grad))

        return Case(self.name, self.fn, factory, note=self.sample.text)


def _eager_output(op: Any, s: Sample) -> Any:
    with torch.no_grad():
        return attempt(lambda: build_function(op, s, "direct")(*s.fresh(False)))


def programs_for(selected: SelectedOp, samples: Sequence[Sample]) -> list[OpProgram]:
    op, name = selected.op, selected.name
    programs: list[OpProgram] = []
    for s in samples:
        for group, kinds in PROGRAM_KINDS.items():
            if group not in selected.kinds:
                continue
            example = None
            if group == "out":
                example = _eager_output(op, s)
                outputs = [example] if isinstance(example, torch.Tensor) else example
                if not isinstance(outputs, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in outputs):
                    continue  # eager raises, or returns something out= cannot take: no buffer to make
            for kind in kinds:
                if program_source(s, kind, 1) is None:
                    continue
                buffers = ()
                if kind == "out_input":
                    buffers = tuple(torch.zeros(t.shape, dtype=t.dtype) for t in _outputs(example))
                fn = build_function(op, s, kind, example)
                programs.append(OpProgram(name, s, kind, fn, buffers, kind not in NO_GRAD_INPUTS))
    return programs


# ---------------------------------------------------------------------------------------------------------
# Running and classifying.
# ---------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One program under one entry point in one setting, classified against eager in the same grad mode."""

    op: str
    sample: int
    program: str
    setting: str
    strategy: str
    category: str  # match, divergence, crash, fallback
    kind: str  # the outcome without fallbacks: match, divergence, crash
    probe: str
    rule: str  # the violated invariant (prototype entry points only), or ""
    got: str  # the entry point's side of the first difference (crash: its exception)
    eager: str  # eager's side
    fallbacks: list[str]
    sample_text: str = ""
    confirmed: bool | None = None  # a defect run again (forward and its probe) and still there
    seconds: float = 0.0
    # Diagnostics, not the invariant (fuzz.wrong_on_a_probe): where stock diverges too, the first probe on which
    # this entry point differs from eager and stock does not.
    wrong_on_a_probe: str = ""

    @property
    def defect(self) -> bool:
        return bool(self.rule)


def _row(program: OpProgram, setting: Setting, label: str, result: StrategyResult, rule: str | None) -> Row:
    outcome = result.outcome
    return Row(
        program.op,
        program.sample.index,
        program.kind,
        setting.label,
        label,
        result.category,
        outcome.kind,
        outcome.probe or "",
        rule or "",
        "" if outcome.kind == "match" else f"{outcome.path or '.'}: {describe(outcome.actual, 400)}",
        "" if outcome.kind == "match" else describe(outcome.expected, 200),
        list(dict.fromkeys(result.fallbacks)),
        program.sample.text,
        seconds=result.seconds,
    )


def run_op_program(
    program: OpProgram,
    inner: str = DEFAULT_INNER,
    settings: Sequence[Setting] = SETTINGS,
    only: str | None = None,
    confirm: bool = True,
    make_strategy: Callable[[str, str, Setting], Strategy] | None = None,
) -> list[Row]:
    """Every setting and entry point of one program (``only``: one ``setting:strategy``, without its stock).

    ``make_strategy(name, inner, setting)`` replaces ``entry_strategy`` (tests plant a defective strategy).
    """
    make_strategy = make_strategy or entry_strategy
    rows: list[Row] = []
    for grad in (True, False):
        chosen = [s for s in settings if s.grad == grad]
        if only is not None:
            chosen = [s for s in chosen if only.startswith(s.label + ":")]
        if not chosen:
            continue
        reference = eager_strategy(grad)
        eager_run = run_program(program, reference)
        eager_raises = isinstance(eager_run.observations["forward"], Raised)
        for setting in chosen:
            names = [n for n in entry_points(setting) if only is None or only == f"{setting.label}:{n}"]
            strategies = {n: make_strategy(n, inner, setting) for n in names}
            runs: dict[str, Run] = {n: run_program(program, s) for n, s in strategies.items()}
            results = {n: StrategyResult(classify(eager_run, r), r.fallbacks, r.seconds) for n, r in runs.items()}
            stock_outcome = results[STOCK].outcome if STOCK in results else None
            for n, result in results.items():
                rule = None
                if n != STOCK and stock_outcome is not None:
                    rule = violated_rule(result.outcome, stock_outcome)
                row = _row(program, setting, n, result, rule)
                if n != STOCK and rule is None and STOCK in runs:
                    found = wrong_on_a_probe(eager_run, runs[n], runs[STOCK])
                    if found is not None:
                        diagnostic = found[0]
                        got = describe(diagnostic.actual, 300)
                        row.wrong_on_a_probe = f"{diagnostic.kind} in {diagnostic.probe}{diagnostic.path}: {got}"
                if rule is not None and confirm:
                    fails = failure_predicate(
                        reference, strategies[n], strategies[STOCK], result.outcome, eager_raises, rule
                    )
                    row.confirmed = bool(attempt(lambda fails=fails: fails(program)) is True)
                rows.append(row)
    return rows


def run_opinfo(
    selected: Sequence[tuple[SelectedOp, Sequence[Sample]]],
    inner: str = DEFAULT_INNER,
    settings: Sequence[Setting] = SETTINGS,
    progress: bool = False,
) -> list[Row]:
    rows: list[Row] = []
    for k, (op, samples) in enumerate(selected):
        start = time.perf_counter()
        for program in programs_for(op, samples):
            rows += run_op_program(program, inner, settings)
        if progress:
            defects = sum(r.defect for r in rows if r.op == op.name)
            seconds = time.perf_counter() - start
            print(f"  [{k + 1}/{len(selected)}] {op.name}: {defects} defects ({seconds:.0f} s)", file=sys.stderr)
    return rows


# ---------------------------------------------------------------------------------------------------------
# Reports.
# ---------------------------------------------------------------------------------------------------------

CATEGORIES = ("match", "divergence", "crash", "fallback")


def column(setting: str, strategy: str) -> str:
    return f"{strategy} {setting}"


def summary(rows: Sequence[Row]) -> dict[str, dict[str, int]]:
    """Per entry point and setting: runs per category, defects per rule, fallbacks that matched."""
    table: dict[str, dict[str, int]] = {}
    for setting in SETTINGS:
        for name in entry_points(setting):
            counts = dict.fromkeys(_SUMMARY_COLUMNS, 0)
            for r in rows:
                if r.setting != setting.label or r.strategy != name:
                    continue
                counts[r.category] += 1
                counts["fallback_match"] += r.category == "fallback" and r.kind == "match"
                counts["wrong_where_stock_matches"] += r.rule == WRONG_WHERE_STOCK_MATCHES
                counts["crash_where_stock_runs"] += r.rule == CRASH_WHERE_STOCK_RUNS
                counts["wrong_on_a_probe"] += bool(r.wrong_on_a_probe)
            if sum(counts[c] for c in CATEGORIES):
                table[column(setting.label, name)] = counts
    return table


def defect_signature(r: Row) -> str:
    """What makes two defects the same for the list: entry point, kind, probe, and the first line of the detail."""
    first = r.got.splitlines()[0] if r.got else ""
    return f"{r.strategy} {r.kind} in {r.probe}{first[:160]}"


def markdown(
    rows: Sequence[Row], selected: Sequence[tuple[str, set[str]]], seconds: float, seed: int, limit: int
) -> str:
    programs = {(r.op, r.sample, r.program) for r in rows}
    samples = {(r.op, r.sample) for r in rows}
    kinds = collections.Counter(k for _, ks in selected for k in ks)
    kinds_text = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
    lines = [
        f"## OpInfo oracle: {len(selected)} ops, {len(samples)} samples, {len(programs)} programs",
        "",
        f"op_db of torch {torch.__version__}; ops that alias or write ({kinds_text}"
        f"; an op may be several), at most {limit} float32 CPU samples each (seed {seed}); {seconds:.0f} s. Each "
        "row counts (program, sample) runs of one entry point in one setting, every probe of the fuzzer compared "
        "with eager in the same grad mode. `fallback` runs are not counted in match/divergence/crash; "
        "`fallback_match` is how many of them still matched eager. `wrong_where_stock_matches` and "
        "`crash_where_stock_runs` are the prototype-only defects (fuzz.violated_rule against stock in the same "
        "setting). `wrong_on_a_probe` (diagnostics, not the invariant): on the other runs, some probe where the "
        "entry point differs from eager while stock does not (stock diverging elsewhere, often by wrapping "
        "eager's error in a Dynamo exception, hides the rest of the run from the rule).",
        "",
        "| entry point, setting | " + " | ".join(_SUMMARY_COLUMNS) + " |",
        "|---|" + "---:|" * len(_SUMMARY_COLUMNS),
    ]
    for label, counts in summary(rows).items():
        lines.append(f"| {label} | " + " | ".join(str(counts[c]) for c in _SUMMARY_COLUMNS) + " |")
    lines += ["", *kind_table(rows)]
    reasons = collections.Counter(f for r in rows for f in r.fallbacks)
    if reasons:
        lines += ["", "Fallback reasons (runs):", ""]
        lines += [f"- {n} x {reason[:200]}" for reason, n in reasons.most_common(12)]
    defects = [r for r in rows if r.defect]
    lines += ["", f"### Prototype-only defects: {len(defects)} runs", ""]
    if not defects:
        lines.append("none")
    by_op: dict[str, list[Row]] = collections.defaultdict(list)
    for r in defects:
        by_op[r.op].append(r)
    for name, found in by_op.items():
        lines += [f"#### {name}", ""]
        grouped: dict[str, list[Row]] = collections.defaultdict(list)
        for r in found:
            grouped[defect_signature(r)].append(r)
        for signature, same in grouped.items():
            where = ", ".join(sorted({f"s{r.sample}/{r.program} {r.setting}" for r in same}))
            confirmed = sum(bool(r.confirmed) for r in same)
            lines.append(f"- {signature} ({len(same)} runs, {confirmed} confirmed; {where})")
            lines.append(f"  - sample {same[0].sample}: `{same[0].sample_text[:300]}`")
        lines.append("")
    diagnostics = [r for r in rows if r.wrong_on_a_probe]
    lines += ["", f"### Diagnostics, wrong on a probe where stock is right: {len(diagnostics)} runs", ""]
    grouped_diagnostics: dict[tuple[str, str], list[Row]] = collections.defaultdict(list)
    for r in diagnostics:
        grouped_diagnostics[r.op, r.strategy].append(r)
    for (name, strategy), same in grouped_diagnostics.items():
        where = ", ".join(sorted({f"s{r.sample}/{r.program} {r.setting}" for r in same}))
        lines.append(f"- {name} under {strategy} ({where}): {same[0].wrong_on_a_probe.splitlines()[0][:200]}")
    return "\n".join(lines) + "\n"


def kind_table(rows: Sequence[Row]) -> list[str]:
    """Per program kind: programs, and per entry point (every setting) runs matching eager (a fallback that
    matched counts) / runs / prototype-only defects."""
    kinds = list(dict.fromkeys(k for group in PROGRAM_KINDS.values() for k in group))
    lines = [
        "Per program kind, each entry point over its settings: `matched / runs / defects` (a fallback that matched "
        "counts as matched):",
        "",
        "| program kind | programs | " + " | ".join(ENTRY_POINTS) + " |",
        "|---|---:|" + "---:|" * len(ENTRY_POINTS),
    ]
    for kind in kinds:
        here = [r for r in rows if r.program == kind]
        if not here:
            continue
        programs = len({(r.op, r.sample) for r in here})
        cells = []
        for name in ENTRY_POINTS:
            mine = [r for r in here if r.strategy == name]
            matched = sum(r.kind == "match" for r in mine)
            cells.append(f"{matched} / {len(mine)} / {sum(r.defect for r in mine)}")
        lines.append(f"| {kind} | {programs} | " + " | ".join(cells) + " |")
    return lines


_SUMMARY_COLUMNS = (
    *CATEGORIES,
    "fallback_match",
    "wrong_where_stock_matches",
    "crash_where_stock_runs",
    "wrong_on_a_probe",
)

CSV_FIELDS = (
    "op",
    "sample",
    "program",
    "setting",
    "strategy",
    "category",
    "kind",
    "probe",
    "rule",
    "confirmed",
    "fallbacks",
    "got",
    "eager",
    "wrong_on_a_probe",
    "sample_text",
    "seconds",
)


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_FIELDS)
        for r in rows:
            d = asdict(r)
            d["fallbacks"] = "; ".join(r.fallbacks)
            d["seconds"] = f"{r.seconds:.3f}"
            writer.writerow([d[k] for k in CSV_FIELDS])


def defects_csv(rows: Sequence[Row], path: Path) -> None:
    write_csv([r for r in rows if r.defect], path)


# ---------------------------------------------------------------------------------------------------------
# Worker processes (--jobs): survive torch crashing the interpreter.
# ---------------------------------------------------------------------------------------------------------


def _worker_command(args: WorkerArgs, ops: Sequence[str], rows: Path, only: str = "", program: str = "") -> list[str]:
    command = [sys.executable, "-m", "predispatch_views.compare.opinfo", "--inner", args.inner]
    command += ["--seed", str(args.seed), "--samples", str(args.samples), "--rows", str(rows)]
    command += ["--ops-exact", ",".join(ops)]
    if only:
        command += ["--only", only]
    if program:
        command += ["--program", program]
    return command


@dataclass(frozen=True)
class WorkerArgs:
    inner: str
    seed: int
    samples: int


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(record) + "\n")


def run_worker(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m predispatch_views.compare.opinfo")
    parser.add_argument("--inner", default=DEFAULT_INNER)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES)
    parser.add_argument("--ops-exact", required=True, help="op names, comma separated, each exactly")
    parser.add_argument("--rows", required=True, help="JSON lines: a 'start' record per program, then its rows")
    parser.add_argument("--only", default="", help="one 'setting:strategy' (crash attribution)")
    parser.add_argument("--program", default="", help="only this program (crash attribution)")
    args = parser.parse_args(argv)
    rows = Path(args.rows)
    done = {r["program_name"] for r in _read_jsonl(rows) if r.get("type") == "done"}
    for chosen, samples in select_ops(args.ops_exact, args.seed, args.samples, exact=True):
        for program in programs_for(chosen, samples):
            if program.name in done or (args.program and program.name != args.program):
                continue
            _append(rows, {"type": "start", "program_name": program.name})
            for row in run_op_program(program, args.inner, only=args.only or None):
                _append(rows, {"type": "row", **asdict(row)})
            _append(rows, {"type": "done", "program_name": program.name})
    return 0


def _died_rows(args: WorkerArgs, op: str, program_name: str, work: Path) -> list[Row]:
    """A program that killed its worker: each setting:strategy in a process of its own; the dead ones crash."""
    rows: list[Row] = []
    sample = int(program_name.split("/")[-2][1:])
    kind = program_name.split("/")[-1]
    for setting in SETTINGS:
        for name in entry_points(setting):
            only = f"{setting.label}:{name}"
            path = work / f"attr_{abs(hash((program_name, only)))}.jsonl"
            path.unlink(missing_ok=True)
            done = subprocess.run(
                _worker_command(args, [op], path, only=only, program=program_name), capture_output=True, timeout=1800
            )
            got = [r for r in _read_jsonl(path) if r.get("type") == "row" and r["strategy"] == name]
            if done.returncode == 0 and got:
                rows.append(_row_from(got[0]))
            else:
                died = f": the process died (exit status {done.returncode})"
                rows.append(Row(op, sample, kind, setting.label, name, "crash", "crash", "process", "", died, "", []))
    for setting in SETTINGS:
        stock = next(r for r in rows if r.setting == setting.label and r.strategy == STOCK)
        for r in rows:
            if r.setting == setting.label and r.strategy != STOCK:
                r.rule = violated_rule(Outcome(r.kind, r.probe), Outcome(stock.kind, stock.probe)) or ""
    return rows


def _row_from(record: dict[str, Any]) -> Row:
    return Row(**{k: v for k, v in record.items() if k != "type"})


def _run_chunk(args: WorkerArgs, ops: Sequence[str], work: Path, index: int) -> list[Row]:
    path = work / f"rows_{index}.jsonl"
    path.unlink(missing_ok=True)
    died: list[Row] = []
    died_programs: set[tuple[str, int, str]] = set()
    while True:
        done = subprocess.run(
            _worker_command(args, ops, path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=6 * 3600
        )
        records = _read_jsonl(path)
        started = [r["program_name"] for r in records if r.get("type") == "start"]
        finished = {r["program_name"] for r in records if r.get("type") == "done"}
        unfinished = [p for p in started if p not in finished]
        if done.returncode == 0 and not unfinished:
            break
        # Only a process killed by a signal is torch crashing; an exception is the harness's own error.
        if not unfinished or done.returncode > 0:
            tail = done.stderr.decode(errors="replace")[-3000:]
            raise RuntimeError(f"an OpInfo worker failed (exit status {done.returncode}):\n{tail}")
        program_name = unfinished[-1]
        op = program_name.rsplit("/", 2)[0]
        print(f"  {program_name}: the process died; attributed per strategy", file=sys.stderr, flush=True)
        died += _died_rows(args, op, program_name, work)
        died_programs.add((op, int(program_name.split("/")[-2][1:]), program_name.split("/")[-1]))
        _append(path, {"type": "done", "program_name": program_name})  # the restarted worker skips it
    rows = [_row_from(r) for r in _read_jsonl(path) if r.get("type") == "row"]
    # The rows a dying worker wrote before it died are replaced by the attributed ones.
    return [r for r in rows if (r.op, r.sample, r.program) not in died_programs] + died


def run_in_workers(names: Sequence[str], args: WorkerArgs, jobs: int, work: Path) -> list[Row]:
    work.mkdir(parents=True, exist_ok=True)
    # Ops spread round-robin so that heavy neighbours (the split family) land in different chunks.
    chunks = [list(names[k :: jobs * 4]) for k in range(min(len(names), jobs * 4))]
    rows: list[Row] = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_run_chunk, args, chunk, work, k) for k, chunk in enumerate(chunks)]
        for k, future in enumerate(futures):
            rows += future.result()
            print(f"opinfo: chunk {k + 1}/{len(chunks)} done ({len(rows)} rows)", file=sys.stderr, flush=True)
    order = {name: k for k, name in enumerate(names)}
    return sorted(rows, key=lambda r: (order.get(r.op, 0), r.sample))


# ---------------------------------------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------------------------------------


def run_opinfo_section(args: argparse.Namespace, out_dir: Path) -> str:
    """What ``compare --opinfo`` runs: print the table and defects, write opinfo.md, opinfo.csv, opinfo_defects.csv."""
    seed = int(str(args.seed).split(",")[0])
    limit = int(args.opinfo_samples)
    inner = args.inners[0]
    began = time.perf_counter()
    selected = select_ops(args.opinfo_ops, seed, limit)
    if not selected:
        print(f"compare: error: --opinfo-ops {args.opinfo_ops!r} selects no op of op_db", file=sys.stderr)
        raise SystemExit(2)
    n_programs = sum(len(programs_for(op, samples)) for op, samples in selected)
    print(
        f"opinfo: {len(selected)} ops, {sum(len(s) for _, s in selected)} samples, {n_programs} programs x "
        f"{sum(len(entry_points(s)) for s in SETTINGS)} runs (inner {inner}, seed {seed})",
        flush=True,
    )
    if args.jobs and args.jobs > 0:
        names = [op.name for op, _ in selected]
        rows = run_in_workers(names, WorkerArgs(inner, seed, limit), args.jobs, out_dir / "opinfo_work")
    else:
        rows = run_opinfo(selected, inner, progress=True)
    seconds = time.perf_counter() - began
    text = markdown(rows, [(op.name, op.kinds) for op, _ in selected], seconds, seed, limit)
    (out_dir / "opinfo.md").write_text(text)
    write_csv(rows, out_dir / "opinfo.csv")
    defects_csv(rows, out_dir / "opinfo_defects.csv")
    print(text)
    print(f"opinfo: {seconds:.0f} s; wrote {out_dir / 'opinfo.md'}, opinfo.csv and opinfo_defects.csv")
    return text


if __name__ == "__main__":
    sys.exit(run_worker())
