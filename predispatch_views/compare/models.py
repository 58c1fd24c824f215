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
import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import _torch_internals as ti
from .benchmarks import BestTime, Settings, _benchmark_environment, fresh_copy
from .strategies import Strategy, eager, prototype, slice_regen, stock, stock_no_fix

TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
TRAIN_STEPS = 10
# (batch, sequence length) of the changing-lengths steps: a first shape, then others, as a loader's last batch.
LENGTHS: tuple[tuple[int, int], ...] = ((2, 16), (3, 11), (1, 7))


@dataclass(frozen=True)
class ModelCase:
    name: str
    config_class: str  # names in the transformers namespace
    model_class: str
    config: dict[str, Any]

    def build(self) -> tuple[torch.nn.Module, dict[str, Any]]:
        import transformers

        torch.manual_seed(0)
        model = getattr(transformers, self.model_class)(getattr(transformers, self.config_class)(**self.config))
        return model, self._inputs(torch.randint(0, self.config["vocab_size"], (2, 8)))

    def inputs(self, batch: int, length: int) -> dict[str, Any]:
        """A batch of ``batch`` sequences of ``length`` tokens, the same on every call."""
        generator = torch.Generator().manual_seed(1000 * batch + length)
        return self._inputs(torch.randint(0, self.config["vocab_size"], (batch, length), generator=generator))

    def _inputs(self, ids: torch.Tensor) -> dict[str, Any]:
        inputs: dict[str, Any] = {"input_ids": ids}
        if self.model_class.startswith("T5"):
            inputs["decoder_input_ids"] = ids.flip(1)
        if self.model_class != "BertModel":
            inputs["use_cache"] = True
        return inputs


_DECODER = {
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip

CASES = (
    ModelCase("gpt2", "GPT2Config", "GPT2LMHeadModel", {
        "vocab_size": 64, "n_positions": 64, "n_embd": 32, "n_layer": 2, "n_head": 2, "resid_pdrop": 0.0,
        "embd_pdrop": 0.0, "attn_pdrop": 0.0, "bos_token_id": 1, "eos_token_id": 2}),
    ModelCase("llama", "LlamaConfig", "LlamaForCausalLM", _DECODER),
    ModelCase("qwen2", "Qwen2Config", "Qwen2ForCausalLM", _DECODER),
    ModelCase("mistral_sliding", "MistralConfig", "MistralForCausalLM", {**_DECODER, "sliding_window": 4}),
    ModelCase("mixtral", "MixtralConfig", "MixtralForCausalLM",
              {**_DECODER, "num_local_experts": 4, "num_experts_per_tok": 2}),
    ModelCase("bert", "BertConfig", "BertModel", {
        "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "max_position_embeddings": 64, "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0}),
    ModelCase("t5", "T5Config", "T5ForConditionalGeneration", {
        "vocab_size": 64, "d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 2,
        "dropout_rate": 0.0, "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}),
)  # fmt: skip


def model_cases() -> list[ModelCase]:
    """Every tiny model whose classes the installed transformers has."""
    import transformers

    return [c for c in CASES if hasattr(transformers, c.config_class) and hasattr(transformers, c.model_class)]


def model_strategies(inners: tuple[str, ...]) -> list[Strategy]:
    out = [eager()]
    for inner in inners:
        out += [stock(inner), stock_no_fix(inner), slice_regen(inner), prototype(inner)]
    return out


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
    error: str = ""  # the step raised (the later lengths did not run)
    mismatches: list[str] = field(default_factory=list)  # what differs from eager's step: loss, outputs...
    prototype_only: list[str] = field(default_factory=list)  # crash or mismatches where its stock matches eager


@dataclass
class ModelRow:
    model: str
    strategy: str
    inner: str | None
    outputs_match: bool = False
    grads_match: bool = False
    n_tensors: int = 0
    views: int = 0
    aliasing_as_eager: bool = False
    inplace_as_eager: int = 0  # returned tensors whose add_(0) behaves as eager's
    graphs: int = 0
    graph_breaks: int = 0
    fallbacks: list[str] = field(default_factory=list)
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
    case: ModelCase,
    strategies: list[Strategy],
    settings: Settings,
    *,
    warm_up: bool = True,
    lengths: Sequence[LengthsStrategy] = (),
) -> list[ModelRow]:
    """Every strategy at the first shape (probes, compile and step time, 10 steps), then the changing-lengths
    steps of ``lengths`` (after the timing: they reset Dynamo)."""
    from .. import FALLBACKS

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
        row = ModelRow(case.name, strategy.label, strategy.inner)
        rows.append(row)
        model.load_state_dict(initial)
        run = strategy.make(fresh_copy(lambda **kw: model(**kw)))
        counters.clear()
        FALLBACKS.clear()
        try:
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss_of(run(**inputs)).backward()
            row.compile_s = time.perf_counter() - start
            observed = _observe(run, model, inputs)
            row.graphs = int(counters["stats"]["unique_graphs"])
            row.graph_breaks = int(sum(counters["graph_break"].values()))
            row.fallbacks = [f"{graph}: {reason}" for graph, reason in dict.fromkeys(FALLBACKS)]
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
        run_lengths(case, model, initial, lengths, rows)
    return rows


def _compare(row: ModelRow, seen: _Observed, trained: Any, ref: _Observed, ref_trained: Any) -> None:
    row.n_tensors = len(seen.tensors)
    row.outputs_match = _close(seen.tensors, ref.tensors)
    row.grads_match = seen.grads.keys() == ref.grads.keys() and _close(
        [seen.grads[k] for k in ref.grads], list(ref.grads.values())
    )
    row.views = sum(is_view for is_view, _ in seen.alias)
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


def _plain_compile_strategy(label: str, reference: str | None, flag: bool) -> LengthsStrategy:
    def make(fn: Callable[..., Any], recorder: GraphRecorder) -> Callable[..., Any]:
        from .. import enable

        compiled = torch.compile(fn, dynamic=None)

        def run(**kwargs: Any) -> Any:
            # The flag is read when Dynamo compiles: every call, so that each recompile sees it.
            with _recording_plain_compile(recorder), enable(flag):
                return compiled(**kwargs)

        return run

    return LengthsStrategy(label, "inductor", reference, make)


def lengths_strategies(inners: tuple[str, ...], flag: bool = True) -> list[LengthsStrategy]:
    """eager; stock and the backend per inner; plain ``torch.compile`` with and without the flag."""
    from .. import backend as prototype_backend

    out = [LengthsStrategy("eager", None, None, lambda fn, recorder: fn)]
    for inner in inners:
        out.append(_backend_strategy(f"stock[{inner}]", inner, None, ti.lookup_backend(inner)))
        out.append(_backend_strategy(f"prototype[{inner}]", inner, f"stock[{inner}]", prototype_backend(inner)))
    if flag:
        out.append(_plain_compile_strategy("stock[inductor]", None, flag=False))
        out.append(_plain_compile_strategy("flag[inductor]", "stock[inductor]", flag=True))
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
    case: ModelCase, model: torch.nn.Module, initial: dict[str, Any], strategy: LengthsStrategy
) -> tuple[list[LengthResult], list[_Step]]:
    """Three SGD steps, one per shape of LENGTHS, from the initial weights, compiled afresh."""
    from .. import FALLBACKS

    torch._dynamo.reset()  # also Dynamo's automatic-dynamic record, which is kept per code location
    model.load_state_dict(initial)
    recorder = GraphRecorder()
    run = strategy.make(fresh_copy(lambda **kw: model(**kw)), recorder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    results: list[LengthResult] = []
    steps: list[_Step] = []
    try:
        for shape in LENGTHS:
            result = LengthResult(shape)
            results.append(result)
            inputs = case.inputs(*shape)
            graphs, symbolic = recorder.graphs, recorder.symbolic_graphs
            FALLBACKS.clear()
            try:
                optimizer.zero_grad(set_to_none=True)
                outputs = run(**inputs)
                tensors = [t.detach().clone() for t in leaves(outputs)]
                alias = alias_structure(list(leaves(outputs)))
                loss = loss_of(outputs)
                loss.backward()
                grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
                optimizer.step()
                inplace = inplace_behaviour(list(leaves(run(**inputs))))  # a fresh call: add_(0) on each
            except Exception as e:  # reported in the table, never hidden; the later lengths do not run
                result.error = _error_text(e)
                break
            finally:
                result.graphs = recorder.graphs - graphs
                result.symbolic_graphs = recorder.symbolic_graphs - symbolic
                result.fallbacks = [f"{graph}: {reason}" for graph, reason in dict.fromkeys(FALLBACKS)]
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
    case: ModelCase,
    model: torch.nn.Module,
    initial: dict[str, Any],
    strategies: Sequence[LengthsStrategy],
    rows: list[ModelRow],
) -> list[ModelRow]:
    """The changing-lengths steps of every strategy, judged against eager's steps (the first strategy): fills
    ``lengths`` of the rows with the same label, and adds rows for strategies the table has no row for."""
    by_label = {r.strategy: r for r in rows}
    steps: dict[str, list[_Step]] = {}
    for strategy in strategies:
        row = by_label.get(strategy.label)
        if row is None:
            row = ModelRow(case.name, strategy.label, strategy.inner, lengths_only=True)
            rows.append(row)
            by_label[strategy.label] = row
        row.lengths_reference = strategy.reference
        row.lengths, steps[strategy.label] = _run_lengths(case, model, initial, strategy)
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


# --- the section -----------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return "" if math.isnan(value) or math.isinf(value) else f"{value:.{digits}f}"


HEADER = (
    "model", "strategy", "outputs", "grads", "views (of tensors)", "aliasing as eager", "add_(0) as eager",
    "graphs / breaks", "fallbacks", "compile (s)", "fwd+bwd (us)", "x eager", "x stock",
    "10 steps: loss rel. diff / max param diff", "lengths run", "recompiles per length",
    "fallbacks over lengths", "parity per length",
)  # fmt: skip
N_LENGTH_COLUMNS = 4


def _yes(value: bool) -> str:
    return "yes" if value else "**no**"


def table_markdown(rows: list[ModelRow]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows:
        if r.lengths_only:
            cells = [r.model, f"{r.strategy} (changing lengths only)"] + [""] * (len(HEADER) - 2 - N_LENGTH_COLUMNS)
        elif r.error:
            cells = [r.model, r.strategy, f"error: {r.error}"] + [""] * (len(HEADER) - 3 - N_LENGTH_COLUMNS)
        else:
            cells = [
                r.model, r.strategy, _yes(r.outputs_match), _yes(r.grads_match), f"{r.views} ({r.n_tensors})",
                _yes(r.aliasing_as_eager), f"{r.inplace_as_eager}/{r.n_tensors}",
                "" if r.inner is None else f"{r.graphs} / {r.graph_breaks}",
                "; ".join(r.fallbacks) or ("none" if r.strategy.startswith("prototype") else ""),
                "" if r.inner is None else _f(r.compile_s), _f(r.step_us, 0), _f(r.step_vs_eager),
                _f(r.step_vs_stock),
                "" if r.inner is None else f"{r.train_loss_rel_diff:.1e} / {r.train_param_max_diff:.1e}",
            ]  # fmt: skip
        cells += length_cells(r)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def length_cells(r: ModelRow) -> list[str]:
    """lengths run, recompiles per length, fallbacks over lengths, parity per length ("" where not run)."""
    if not r.lengths:
        return [""] * N_LENGTH_COLUMNS
    run = sum(not x.error for x in r.lengths)
    recompiles = [f"{x.graphs}" + (f" ({x.symbolic_graphs} sym)" if x.symbolic_graphs else "") for x in r.lengths]
    parity = []
    for x in r.lengths:
        if x.error:
            parity.append("**crash (prototype-only)**" if x.prototype_only else "crash")
        elif r.inner is None:
            parity.append("reference")
        else:
            marked = [f"**{m} (prototype-only)**" if m in x.prototype_only else m for m in x.mismatches]
            parity.append("+".join(marked) or "ok")
    parity += ["-"] * (len(LENGTHS) - len(r.lengths))
    fallbacks = sum(len(x.fallbacks) for x in r.lengths)
    return [
        f"{run}/{len(LENGTHS)}",
        "" if r.inner is None else " / ".join(recompiles + ["-"] * (len(LENGTHS) - len(r.lengths))),
        "" if r.inner is None or r.lengths_reference is None else str(fallbacks),
        " / ".join(parity),
    ]


def lengths_notes(rows: list[ModelRow]) -> str:
    """Every crash and fallback of the changing-lengths steps, with the length it happened at."""
    notes = []
    for r in rows:
        for x in r.lengths:
            shape = f"{x.shape[0]}x{x.shape[1]}"
            if x.error:
                tag = " **(prototype-only crash: its stock ran this length)**" if x.prototype_only else ""
                notes.append(f"- {r.model} / {r.strategy} at {shape}: crashed{tag}: {x.error}")
            notes += [f"- {r.model} / {r.strategy} at {shape}: fallback: {f[:240]}" for f in x.fallbacks]
    if not notes:
        return ""
    return "Changing lengths: crashes and fallbacks (batch x length):\n\n" + "\n".join(notes)


def lengths_summary(rows: list[ModelRow]) -> list[str]:
    """One line per model and prototype strategy: lengths run, parity, crashes, fallbacks."""
    out = []
    for r in rows:
        if not r.lengths or r.lengths_reference is None:
            continue
        run = sum(not x.error for x in r.lengths)
        crashes = [f"{x.shape[0]}x{x.shape[1]}" for x in r.lengths if x.error]
        only = sorted({m for x in r.lengths for m in x.prototype_only})
        out.append(
            f"{r.model} {r.strategy}: {run}/{len(LENGTHS)} lengths, parity "
            f"{' / '.join(length_cells(r)[3].replace('**', '').split(' / '))}, crashes {crashes or 'none'}, "
            f"fallbacks {sum(len(x.fallbacks) for x in r.lengths)}, prototype-only {only or 'none'}"
        )
    return out


def inplace_notes(rows: list[ModelRow]) -> str:
    notes = [f"- {r.model} / {r.strategy}: {e}" for r in rows for e in r.inplace_examples]
    if not notes:
        return ""
    return "Returned tensors whose `add_(0)` differs from eager (first two per row; eager -> strategy):\n\n" + (
        "\n".join(notes)
    )


def model_settings(args: argparse.Namespace) -> Settings:
    # aot_eager unless --models-inner says otherwise: inductor would add minutes of gcc per model.
    inners = tuple(i for i in (getattr(args, "models_inner", None) or "aot_eager").split(",") if i)
    return Settings(
        device=torch.device("cpu"), inners=inners, quick=True, min_run_time=0.05, rounds=3, step_cap_s=math.inf,
        budget_s=1.0,
    )  # fmt: skip


def run_models_section(args: argparse.Namespace, out_dir: Path) -> str:
    try:
        import transformers
    except ImportError:
        return '## Real models\n\nSkipped: transformers is not installed (`pip install -e ".[models]"`).\n'
    transformers.logging.set_verbosity_error()
    settings = model_settings(args)
    wanted = getattr(args, "cases", None)
    cases = [c for c in model_cases() if not wanted or wanted in c.name]
    strategies = model_strategies(settings.inners)
    flag = True  # the flag's rows compile with inductor: about as long again as the rest of a model's rows
    lengths = lengths_strategies(settings.inners, flag=flag)
    start = time.perf_counter()
    rows: list[ModelRow] = []
    with _benchmark_environment():
        for case in cases:
            started = time.perf_counter()
            model_rows = run_model(case, strategies, settings, lengths=lengths)
            rows += model_rows
            print(f"  model {case.name}: {time.perf_counter() - started:.0f} s", flush=True)
            for line in lengths_summary(model_rows):
                print(f"    {line}", flush=True)
        torch._dynamo.reset()
    shapes = ", ".join(f"{b}x{n}" for b, n in LENGTHS)
    parts = [
        "## Real models",
        f"transformers {transformers.__version__}, torch {torch.__version__}, CPU, inner backends "
        f"{', '.join(settings.inners)}. Tiny configs built in code (2 layers, hidden 32, batch 2 x 8 tokens, "
        "random weights, dropout 0; decoders called with `use_cache=True`). Outputs and grads: allclose to "
        f"eager (rtol {TOLERANCE['rtol']}, atol {TOLERANCE['atol']}) over every returned tensor, caches "
        "included, and every parameter's grad (loss: mean of squares of each floating output). Views: returned "
        "tensors that are views; aliasing as eager: same views and same storage sharing among them. "
        "`add_(0)` as eager: returned tensors of a fresh call whose in-place add raises (same message) or not "
        "as in eager. Graphs / breaks: Dynamo's counters. Compile: wall time of the first forward+backward, "
        "caches off. fwd+bwd: best block over "
        f"{settings.rounds} interleaved rounds (process CPU time, 1 thread). 10 steps: SGD lr 0.05 from the same "
        "weights, last loss and parameters against eager's.",
        f"Changing lengths: from the same weights, one SGD step (lr 0.05) per shape {shapes} (batch x tokens), "
        "as a data loader's last batch gives, each compiled afresh with Dynamo's automatic dynamic shapes (the "
        "second shape recompiles with symbolic sizes: `sym` counts those graphs). Strategies: eager, stock and "
        f"the backend with {', '.join(settings.inners)}"
        + (
            ", plain `torch.compile` (stock[inductor]) and the same under the flag (`predispatch_views.enable()`,"
            " flag[inductor])"
            if flag
            else ""
        )
        + ". Per step, against eager's step: loss, every returned tensor, every parameter's grad, alias structure"
        " and `add_(0)` behaviour of a fresh call; `ok` where all match, else what differs, `crash` where the step"
        " raised (the later shapes then do not run). A crash or difference of a prototype row where its stock"
        " (same inner) matches eager is marked prototype-only: a defect. Fallbacks over lengths: prototype"
        " fallbacks logged during the steps (listed below).",
        table_markdown(rows),
        lengths_notes(rows),
        inplace_notes(rows),
        f"_Models section: {time.perf_counter() - start:.0f} s._",
    ]
    text = "\n\n".join(p for p in parts if p) + "\n"
    (Path(out_dir) / "models.md").write_text(text)
    print(text)
    return text
