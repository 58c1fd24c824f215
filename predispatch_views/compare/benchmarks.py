"""The performance half of ``python -m predispatch_views compare``.

For every workload (workloads.py) and strategy (strategies.py), in one process:
- compile time: wall time of the first forward+backward (Dynamo, AOTAutograd and the inner backend, forward
  and backward graphs). Each strategy compiles its own copy of the program's code, after one
  ``torch._dynamo.reset()`` per workload, with the FX-graph and AOTAutograd caches off, so no strategy reuses
  another's work; one-time costs are paid beforehand by a warm-up on toy sizes;
- forward and forward+backward time at steady state: ``torch.utils.benchmark.Timer.blocked_autorange``, best
  block (each block averages many calls) over interleaved rounds of all strategies. On CPU the clock is the
  process CPU time with one intra-op thread, so that other jobs sharing the cores inflate it less (it equals
  wall time on an idle machine); on CUDA, wall time with synchronization;
- the backward graph: autograd nodes reachable from the outputs, by type;
- memory: bytes of the distinct storages held by the outputs and by the tensors their backward graph saved
  (device independent); on CUDA also the peak allocated during one forward+backward.
Ratios are to eager and to stock with the same inner backend, from the same run. Then the scaling series
(the seed program at several N) gets a least-squares growth exponent and a log-log plot, the epilogue alone
is timed against the eager view call it replays, and each target of the issue is checked.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.utils.benchmark import Timer

from .compile_time import QUICK as COMPILE_QUICK
from .compile_time import WORKLOADS as COMPILE_WORKLOADS
from .compile_time import CompileRow, contenders
from .compile_time import describe as compile_description
from .compile_time import markdown as compile_markdown
from .compile_time import measure as measure_compiles
from .compile_time import targets as compile_targets
from .scaling import fit_exponent, plot_scaling
from .strategies import Strategy, all_strategies, prototype, stock
from .timing import benchmark_environment as _benchmark_environment
from .timing import fresh_copy
from .workloads import Instance, Workload, all_workloads, seed_program, tiny_workloads


@dataclass(frozen=True)
class Settings:
    device: torch.device
    inners: tuple[str, ...]
    quick: bool
    min_run_time: float  # seconds per Timer measurement
    rounds: int  # interleaved timing rounds per workload; each strategy keeps its best
    step_cap_s: float  # skip a scaling point whose projected forward+backward is longer than this
    budget_s: float = 3.0  # timing seconds per measured call, beyond the first round
    slow: bool = False  # also N=3000 in the scaling series
    compile_rounds: int = 0  # rounds of compile_time.py's measure (0: none)

    @property
    def timer(self) -> Callable[[], float]:
        if self.device.type == "cuda":
            from torch.utils.benchmark.utils.timer import timer as synchronized_wall_clock

            return synchronized_wall_clock
        return time.process_time

    @property
    def clock(self) -> str:
        return "wall time, synchronized" if self.device.type == "cuda" else "process CPU time, 1 thread"


@dataclass
class Row:
    workload: str
    n_outputs: int
    strategy: str  # the strategy's label, e.g. "prototype[aot_eager]"
    inner: str | None
    compile_s: float = math.nan
    fwd_us: float = math.inf  # best over rounds
    step_us: float = math.inf
    nodes: Counter[str] = field(default_factory=Counter)
    held_bytes: int = 0
    peak_bytes: int | None = None
    skipped: str = ""
    # Filled in once every strategy of the workload has run.
    fwd_vs_eager: float = math.nan
    step_vs_eager: float = math.nan
    step_vs_stock: float = math.nan
    compile_vs_stock: float = math.nan

    @property
    def name(self) -> str:
        return self.strategy.split("[")[0]

    def node_summary(self) -> str:
        if not self.nodes:
            return ""
        top, count = self.nodes.most_common(1)[0]
        return f"{sum(self.nodes.values())} ({count} {top})"


# --- measuring one workload under every strategy ---------------------------------------------------------


def compile_instance(workload: Workload, strategy: Strategy, settings: Settings) -> tuple[Row, Instance]:
    """Build the program under the strategy and time its first forward+backward (the compile)."""
    row = Row(workload.name, workload.n_outputs, strategy.label, strategy.inner)
    instance = workload.instantiate(lambda fn: strategy.make(fresh_copy(fn)), settings.device)
    start = time.perf_counter()
    instance.step()
    _synchronize(settings.device)
    row.compile_s = time.perf_counter() - start
    return row, instance


class BestTime:
    """Seconds per call, best block over rounds. The first round is ``Timer.blocked_autorange`` (which also sizes
    the blocks); each later round times one more block of that size, until ``settings.budget_s`` is spent (a
    call of seconds gets one round). Other jobs on a shared machine only ever add time, so the best block is
    the least disturbed estimate."""

    def __init__(self, fn: Callable[[], Any], settings: Settings) -> None:
        self.timer = Timer("fn()", globals={"fn": fn}, timer=settings.timer, num_threads=torch.get_num_threads())
        self.min_run_time = settings.min_run_time
        self.budget_s = settings.budget_s
        self.number = 0
        self.spent = 0.0
        self.best = math.inf

    def round(self) -> float:
        if self.number == 0:
            measurement = self.timer.blocked_autorange(min_run_time=self.min_run_time)
            self.number = measurement.number_per_run
        elif self.spent < self.budget_s:
            measurement = self.timer.timeit(self.number)
        else:
            return self.best
        self.spent += sum(measurement.times) * self.number
        self.best = min(self.best, *measurement.times)
        return self.best


def inspect_instance(row: Row, instance: Instance, settings: Settings) -> None:
    """The backward graph and the memory of one forward (and, on CUDA, the peak of one forward+backward)."""
    outputs = instance.forward()
    row.nodes = autograd_nodes(outputs)
    row.held_bytes = held_bytes(outputs)
    del outputs
    if settings.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        instance.step()
        torch.cuda.synchronize()
        row.peak_bytes = torch.cuda.max_memory_allocated() - base


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _tensors(outputs: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor)]


def _graph(outputs: Any) -> list[Any]:
    """Every autograd node reachable from the outputs, each once."""
    seen: dict[int, Any] = {}
    stack = [t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node  # keeps the Python wrapper alive, so ids stay unique
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return list(seen.values())


def autograd_nodes(outputs: Any) -> Counter[str]:
    """Autograd nodes of the backward graph reachable from the outputs, counted by type."""
    return Counter(type(node).__name__ for node in _graph(outputs))


def held_bytes(outputs: Any) -> int:
    """Bytes of the distinct storages the outputs and their backward graph's saved tensors keep alive."""
    storages: dict[int, int] = {}

    def add(value: Any) -> None:
        for t in _tensors(value):
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()

    add(outputs)
    for node in _graph(outputs):
        if hasattr(node, "saved_tensors"):  # a custom Function's node is its ctx (CompiledFunctionBackward)
            with contextlib.suppress(RuntimeError):
                add(list(node.saved_tensors))
        for attr in dir(node):
            if attr.startswith("_saved_"):  # what a built-in node saved (_saved_self, _saved_result...)
                with contextlib.suppress(RuntimeError):
                    add(getattr(node, attr))
    return sum(storages.values())


# --- the epilogue alone ----------------------------------------------------------------------------------


EPILOGUE_SIZES = (10, 50, 200, 1000)


@dataclass
class EpilogueRow:
    n: int
    run_us: float  # the runtime's generated function, with a core that returns a precomputed tensor
    eager_us: float  # the view call it replays, as eager runs it: base.unbind(0)

    @property
    def overhead_us(self) -> float:
        return self.run_us - self.eager_us

    @property
    def bound_us(self) -> float:
        return 10 + 0.5 * self.n


def epilogue_rows(ns: tuple[int, ...], settings: Settings) -> list[EpilogueRow]:
    from ..capture import capture_function
    from ..pipeline import compile_captured
    from ..runtime import build_runtime

    rows = []
    for n in ns:
        x = torch.randn(n, 256, device=settings.device, requires_grad=True)
        graph, _ = capture_function(lambda t: list(seed_program(t)), [x])
        program = compile_captured(graph, [x], "eager", compile_core=False, strict=True)
        assert program.sliced is not None
        base = x.mul(2)
        run = build_runtime(program.sliced, [lambda *args, out=(base,): out])
        run_time = BestTime(lambda run=run, x=x: run(x), settings)
        eager_time = BestTime(lambda base=base: base.unbind(0), settings)
        for _ in range(settings.rounds):  # interleaved, as in run_benchmarks
            run_time.round()
            eager_time.round()
        rows.append(EpilogueRow(n, run_time.best * 1e6, eager_time.best * 1e6))
    return rows


# --- the whole section -----------------------------------------------------------------------------------


def settings_from_args(args: argparse.Namespace) -> Settings:
    try:
        device = torch.device(getattr(args, "device", "cpu") or "cpu")
    except RuntimeError as e:
        raise SystemExit(f"--device: {e}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: CUDA is not available here (torch.cuda.is_available() is False)")
    if device.type not in ("cpu", "cuda"):
        raise SystemExit(f"--device {device}: only cpu and cuda are supported")
    perf_inner = tuple(i.strip() for i in (getattr(args, "perf_inner", None) or "").split(",") if i.strip())
    inners = perf_inner or tuple(getattr(args, "inners", None) or ("aot_eager", "inductor"))
    quick = bool(getattr(args, "quick", False))
    if quick:  # one inner backend: aot_eager unless the caller asked for others only
        inners = ("aot_eager",) if "aot_eager" in inners else inners[:1]
    min_run_time = getattr(args, "min_run_time", None)
    step_cap_s = getattr(args, "step_cap", None)
    return Settings(
        device=device,
        inners=inners,
        quick=quick,
        min_run_time=min_run_time or (0.02 if quick else 0.1),
        rounds=getattr(args, "rounds", None) or (6 if quick else 7),
        step_cap_s=step_cap_s or (0.1 if quick else 10.0),
        budget_s=0.3 if quick else 3.0,
        slow=bool(getattr(args, "slow", False)),
        compile_rounds=getattr(args, "compile_rounds", None) or (3 if quick else 5),
    )


def run_benchmarks(settings: Settings, workloads: list[Workload], progress: Callable[[str], None] = print) -> list[Row]:
    """Every workload under every strategy; a scaling point projected too slow is listed as skipped.

    Per workload, every strategy is compiled first (compile time = its first forward+backward), then all are
    timed in ``settings.rounds`` interleaved rounds and each keeps its best: a burst of load from other jobs
    then slows one round of every strategy, not all rounds of one, and the ratios stay comparable.
    """
    strategies = all_strategies(settings.inners)
    rows: list[Row] = []
    history: dict[str, list[tuple[int, float]]] = {}  # "workload/strategy" -> (n, step s) at the sizes done
    with _benchmark_environment():
        started = time.perf_counter()
        _warm_up(settings)
        progress(f"  (warm-up: {time.perf_counter() - started:.1f} s)")
        for workload in workloads:
            started = time.perf_counter()
            torch._dynamo.reset()
            live: dict[str, tuple[Row, Instance]] = {}  # compiled and not failed
            workload_rows = []
            for strategy in strategies:
                if workload.strategies is not None and strategy.name not in workload.strategies:
                    continue
                key = f"{workload.name}/{strategy.label}"
                row = Row(workload.name, workload.n_outputs, strategy.label, strategy.inner)
                projected = _project(history.get(key, []), workload.n_outputs)
                if projected > settings.step_cap_s:
                    row.skipped = f"projected {projected:.1f} s per forward+backward"
                else:
                    try:
                        row, instance = compile_instance(workload, strategy, settings)
                        live[key] = (row, instance)
                    except Exception as e:  # one broken strategy must not lose the table
                        row.skipped = _error(e)
                workload_rows.append(row)
            try:
                timers = [(row, BestTime(i.forward, settings), BestTime(i.step, settings)) for row, i in live.values()]
                for _ in range(settings.rounds):
                    for row, forward, step in timers:
                        row.fwd_us, row.step_us = forward.round() * 1e6, step.round() * 1e6
                del timers
                for key, (row, instance) in live.items():
                    inspect_instance(row, instance, settings)
                    history.setdefault(key, []).append((row.n_outputs, row.step_us * 1e-6))
            except Exception as e:
                for row in workload_rows:
                    row.skipped = row.skipped or _error(e)
            del live
            _fill_ratios(workload_rows)
            for row in workload_rows:
                progress(_progress_line(row))
            progress(f"  ({workload.name} N={workload.n_outputs}: {time.perf_counter() - started:.1f} s)")
            rows += workload_rows
        torch._dynamo.reset()
    return rows


def _error(e: Exception) -> str:
    return f"error: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}"


def _project(history: list[tuple[int, float]], n: int) -> float:
    """Forward+backward time at n from the smaller sizes: the fitted exponent, or quadratic from one point."""
    if not history:
        return 0.0
    last_n, last_t = history[-1]
    k = fit_exponent(*zip(*history)) if len(history) >= 2 else 2.0
    return last_t * (n / last_n) ** max(k, 1.0)


def _warm_up(settings: Settings) -> None:
    """Pay one-time costs (imports, first trace of each kind of program) before the first timed compile."""
    for inner in settings.inners:
        for strategy in (stock(inner), prototype(inner)):  # the other two share stock's code paths
            for workload in tiny_workloads():
                torch._dynamo.reset()
                workload.instantiate(strategy.make, settings.device).step()


def _fill_ratios(rows: list[Row]) -> None:
    by_label = {r.strategy: r for r in rows}
    eager = by_label.get("eager")
    for r in rows:
        stock = by_label.get(f"stock[{r.inner}]")
        if eager is not None:
            r.fwd_vs_eager = r.fwd_us / eager.fwd_us
            r.step_vs_eager = r.step_us / eager.step_us
        if stock is not None:
            r.step_vs_stock = r.step_us / stock.step_us
            r.compile_vs_stock = r.compile_s / stock.compile_s


def _progress_line(r: Row) -> str:
    if r.skipped:
        return f"  {r.workload:12s} {r.strategy:30s} skipped: {r.skipped}"
    return (
        f"  {r.workload:12s} {r.strategy:30s} compile {r.compile_s:6.2f} s  fwd {r.fwd_us:10.1f} us  "
        f"fwd+bwd {r.step_us:10.1f} us  nodes {r.node_summary()}"
    )


# --- reporting -------------------------------------------------------------------------------------------


def _f(value: float, digits: int = 2) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _us(value: float) -> str:
    if math.isnan(value):
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def table_markdown(rows: list[Row], cuda: bool) -> str:
    header = [
        "workload", "N", "strategy", "fwd (us)", "fwd x eager", "fwd+bwd (us)", "x eager", "x stock",
        "compile (s)", "compile x stock", "backward nodes (most common)", "held (MB)",
    ]  # fmt: skip
    if cuda:
        header.append("peak (MB)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if r.skipped:
            cells = [r.workload, str(r.n_outputs), r.strategy, f"skipped: {r.skipped}"] + [""] * (len(header) - 4)
        else:
            cells = [
                r.workload, str(r.n_outputs), r.strategy, _us(r.fwd_us), _f(r.fwd_vs_eager), _us(r.step_us),
                _f(r.step_vs_eager), _f(r.step_vs_stock), _f(r.compile_s), _f(r.compile_vs_stock),
                r.node_summary(), _f(r.held_bytes / 2**20, 3),
            ]  # fmt: skip
            if cuda:
                cells.append(_f((r.peak_bytes or 0) / 2**20, 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(rows: list[Row], path: Path) -> None:
    fields = [
        "workload", "n_outputs", "strategy", "inner", "compile_s", "fwd_us", "step_us", "fwd_vs_eager",
        "step_vs_eager", "step_vs_stock", "compile_vs_stock", "nodes_total", "nodes_by_type", "held_bytes",
        "peak_bytes", "skipped",
    ]  # fmt: skip
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        for r in rows:
            by_type = ";".join(f"{k}={v}" for k, v in sorted(r.nodes.items()))
            writer.writerow([
                r.workload, r.n_outputs, r.strategy, r.inner or "", r.compile_s, r.fwd_us, r.step_us,
                r.fwd_vs_eager, r.step_vs_eager, r.step_vs_stock, r.compile_vs_stock, sum(r.nodes.values()),
                by_type, r.held_bytes, "" if r.peak_bytes is None else r.peak_bytes, r.skipped,
            ])  # fmt: skip


def scaling_series(rows: list[Row]) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.workload == "seed" and not r.skipped:
            series.setdefault(r.strategy, []).append((r.n_outputs, r.step_us))
    return series


def exponents(series: dict[str, list[tuple[int, float]]]) -> dict[str, float]:
    return {label: fit_exponent(*zip(*points)) if points else math.nan for label, points in series.items()}


def epilogue_markdown(rows: list[EpilogueRow]) -> str:
    lines = [
        "| N | generated run() (us) | eager base.unbind(0) (us) | overhead (us) | bound 10 + 0.5 N (us) |",
        "|---|---|---|---|---|",
    ]
    for e in rows:
        lines.append(f"| {e.n} | {_us(e.run_us)} | {_us(e.eager_us)} | {e.overhead_us:.1f} | {e.bound_us:.0f} |")
    return "\n".join(lines)


@dataclass
class Target:
    name: str
    measured: float
    limit: float
    detail: str

    @property
    def met(self) -> bool:
        return not math.isnan(self.measured) and self.measured <= self.limit


def check_targets(
    rows: list[Row], epilogue: list[EpilogueRow], inners: tuple[str, ...], compiles: Sequence[CompileRow] = ()
) -> list[Target]:
    def find(workload: str, n: int, label: str) -> Row | None:
        for r in rows:
            if r.workload == workload and r.n_outputs == n and r.strategy == label and not r.skipped:
                return r
        return None

    targets: list[Target] = []
    for inner in inners:
        label = f"prototype[{inner}]"
        at_1000, at_50 = find("seed", 1000, label), find("seed", 50, label)
        nan = math.nan
        targets.append(Target(f"{label}: seed N=1000 fwd+bwd vs eager", at_1000.step_vs_eager if at_1000 else nan,
                              1.0, ""))  # fmt: skip
        targets.append(Target(f"{label}: seed N=1000 fwd+bwd vs stock", at_1000.step_vs_stock if at_1000 else nan,
                              0.4, ""))  # fmt: skip
        targets.append(Target(f"{label}: seed N=50 fwd+bwd vs stock", at_50.step_vs_stock if at_50 else nan,
                              0.7, ""))  # fmt: skip
    targets += [Target(*t) for t in compile_targets(compiles)]  # compile time: Note in compile_time.py
    if epilogue:
        worst = max(epilogue, key=lambda e: e.overhead_us / e.bound_us)
        detail = f"N={worst.n}: {worst.overhead_us:.1f} us of {worst.bound_us:.0f} us"
        targets.append(Target("epilogue overhead / (10 us + 0.5 us N), worst N",
                              worst.overhead_us / worst.bound_us, 1.0, detail))  # fmt: skip
    return targets


def targets_markdown(targets: list[Target]) -> str:
    lines = ["| target | measured | limit | met | detail |", "|---|---|---|---|---|"]
    for t in targets:
        met = "yes" if t.met else "**no**"
        lines.append(f"| {t.name} | {_f(t.measured)} | {t.limit:g} | {met} | {t.detail} |")
    return "\n".join(lines)


def fixed_overhead_note(rows: list[Row]) -> str:
    """What any compiled call costs beyond eager, from the single-view workload (the overhead floor)."""
    single = {r.strategy: r for r in rows if r.workload == "single_view" and not r.skipped}
    eager = single.get("eager")
    if eager is None:
        return ""
    parts = [
        f"{label}: +{r.fwd_us - eager.fwd_us:.0f} us forward, +{r.step_us - eager.step_us:.0f} us forward+backward"
        for label, r in single.items()
        if label != "eager"
    ]
    return "Fixed cost per call over eager (single_view workload): " + "; ".join(parts) + "."


def run_perf_section(args: argparse.Namespace, out_dir: Path) -> str:
    """Run every benchmark, print the tables, write perf.md, perf.csv and scaling.png; return the Markdown."""
    settings = settings_from_args(args)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    print(f"performance: device {settings.device}, inners {', '.join(settings.inners)}, clock {settings.clock}")
    rows = run_benchmarks(settings, all_workloads(settings.quick, settings.slow))
    with _benchmark_environment():
        epilogue = epilogue_rows(EPILOGUE_SIZES, settings)
    series = scaling_series(rows)
    fits = exponents(series)
    png = plot_scaling(series, out_dir / "scaling.png", f"seed program on {settings.device.type}")
    write_csv(rows, out_dir / "perf.csv")
    compiles: list[CompileRow] = []
    names = COMPILE_QUICK if settings.quick else tuple(COMPILE_WORKLOADS)
    if settings.compile_rounds and settings.device.type == "cpu":  # CPU seconds mean nothing for CUDA kernels
        for inner in settings.inners:
            compiles += measure_compiles(inner, names, settings.compile_rounds, contenders(inner))
    targets = check_targets(rows, epilogue, settings.inners, compiles)
    elapsed = time.perf_counter() - start

    parts = [
        "## Performance",
        f"Device {settings.device.type}, torch {torch.__version__}, inner backends {', '.join(settings.inners)}"
        f"{' (--quick)' if settings.quick else ''}. Times per call: best block of `Timer.blocked_autorange` "
        f"over {settings.rounds} interleaved rounds ({settings.clock}); compile is the wall time of one first "
        "forward+backward with the FX-graph and AOTAutograd caches off (the compile-time table below repeats it, "
        "in CPU time). `x eager` and `x stock` are forward+backward ratios to "
        "eager and to stock with the same inner backend, from this run. Backward nodes: autograd nodes "
        "reachable from the outputs. Held: distinct storages kept alive by the outputs and the tensors "
        "their backward graph saved"
        + ("; peak: max allocated during one forward+backward." if settings.device.type == "cuda" else "."),
        table_markdown(rows, settings.device.type == "cuda"),
        "### Scaling (seed program, forward+backward vs N)",
        "Growth exponent k of time ~ N^k, least squares on log-log over all N; the fixed cost per call flattens "
        "the small sizes, so the slope between the two largest N is given too (closer to the asymptotic growth):",
        "\n".join(
            f"- {label}: k = {_f(k)}, between the two largest N {_f(fit_exponent(*zip(*series[label][-2:])))} "
            f"(N = {', '.join(str(n) for n, _ in series[label])})"
            for label, k in fits.items()
        ),
        f"![scaling]({png.name})" if png else "_(matplotlib not installed: `pip install .[plot]` for the plot)_",
        *(
            [
                "### Compile time (CPU, interleaved rounds)",
                compile_description(names, settings.compile_rounds),
                compile_markdown(compiles),
            ]
            if compiles
            else []
        ),
        "### Epilogue alone",
        "The runtime's generated function for the seed's epilogue with a core that returns a precomputed tensor, "
        "against the eager call it replays; overhead = difference.",
        epilogue_markdown(epilogue),
        "### Targets",
        targets_markdown(targets),
        fixed_overhead_note(rows),
        f"_Performance section: {elapsed:.0f} s._",
    ]
    text = "\n\n".join(p for p in parts if p) + "\n"
    (out_dir / "perf.md").write_text(text)
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m predispatch_views.compare.benchmarks``: the performance section alone (scripts/gpu_bench.sh)."""
    parser = argparse.ArgumentParser(prog="python -m predispatch_views.compare.benchmarks")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--inner", default="aot_eager,inductor", help="inner backends, comma separated")
    parser.add_argument("--quick", action="store_true", help="aot_eager only, smaller tensors, shorter timing")
    parser.add_argument("--out", default="results/perf", help="folder for perf.md, perf.csv and scaling.png")
    parser.add_argument("--min-run-time", type=float, default=None, help="seconds per Timer measurement")
    parser.add_argument("--slow", action="store_true", help="also N=3000 in the scaling series")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds per workload")
    parser.add_argument("--step-cap", type=float, default=None, help="skip scaling points projected slower (s)")
    parser.add_argument("--compile-rounds", type=int, default=None, help="rounds of the compile-time measure")
    args = parser.parse_args(argv)
    args.inners = tuple(i for i in args.inner.split(",") if i)
    run_perf_section(args, Path(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
