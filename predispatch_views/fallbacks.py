"""Every reason a program falls back: the one list the docs are generated from (fallback_docs.py renders it into
README.md and design/; tests/test_docs.py checks them and that every reason logged carries an entry's ``marker``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FallbackReason:
    summary: str  # a short Markdown phrase, for the lists in README.md and design/README.md
    logged: str  # the message as logged (Markdown), for design/04's table
    why: str  # why the program cannot be replayed
    module: str  # the module (under predispatch_views/) whose source produces the message
    marker: str  # a literal piece of the message, as written in that source


class FallbackKind(enum.Enum):
    """Why a program falls back: each member's value is its entry in the docs' lists."""

    STORAGE_CHANGE = FallbackReason(
        "`resize_`/`set_`, or an `out=` call that resizes its out tensor (a storage change; `set_`/`resize_` run in "
        "eager between segments where they can; compile_function compiles an `out=` call resizing its own tensors)",
        "`<op> changes a tensor's storage` (`resize_`, `resize_as_`, `set_`)",
        "functionalization cannot express a storage swap (Note [set_ between segments] says where a cut helps).",
        "storage_rules.py",
        "changes a tensor's storage",
    )
    READ_AFTER_UNRECOMPUTABLE_MUTATION = FallbackReason(
        "compiled code that reads a base after a mutation replayed in eager that the core cannot recompute out of "
        "place (a write through a view, or under no_grad), where the program cannot be cut after it (Note [Segments])",
        "`<node> reads <alias> after <mutation> mutated its base (through a view, or under no_grad), and that "
        "mutation must be replayed in eager`",
        "the epilogue runs after the whole core; a write through a view has no out-of-place form the core could "
        "recompute, and one of a no_grad write would lose its target's history. Such a program is cut in two after "
        "the mutation (Note [Segments]); it falls back only where the cut is refused.",
        "fallback_rules.py",
        "mutated its base (through a view, or under",
    )
    READ_OF_ALIAS_TAKEN_BEFORE_MUTATION = FallbackReason(
        "compiled code that reads an alias taken before a mutation replayed in eager, uncut there (Note [Segments])",
        "`<node> reads <alias>, an alias taken before <mutation> mutated its base`",
        "the core's copy of that alias would miss the mutation the epilogue replays later.",
        "fallback_rules.py",
        "an alias taken before",
    )
    REPLAYED_COPY_BEFORE_CORE_WRITE = FallbackReason(
        "a write replayed in eager that writes, or copies values from, a base the compiled code writes afterwards, "
        "where the program cannot be cut in two after the mutation (Note [Segments])",
        "`<node> reads <value>` (or `writes`) `, whose base <mutation> of the compiled region writes afterwards`",
        "the epilogue runs after the whole core: it would copy what the core's later write left (s43_876: "
        "`t0.copy_(a); a.mul_(2)` returned twice `a`), or write over it (s1003_586: a silent wrong value).",
        "fallback_rules.py",
        "of the compiled region writes afterwards",
    )
    CORE_READS_REPLAYED_MUTATION = FallbackReason(
        "compiled code that reads a value produced by a mutation replayed in eager, uncut there (Note [Segments])",
        "`the compiled region reads <node>, produced by a mutation replayed in eager`",
        "the same ordering problem for a value derived from such a mutation.",
        "fallback_rules.py",
        "produced by a mutation replayed in eager",
    )
    RANDOM_MUTATION_AFTER_VIEWS = FallbackReason(
        "a random in-place op (`uniform_`, `bernoulli_`, in-place dropout) replayed after the views are taken, where "
        "the program cannot be cut in two after the mutation (Note [Segments])",
        "`<node> (<op>) draws random numbers after a view is taken; replayed after the compiled region it would draw "
        "again, in another order`",
        "replayed, it draws after every random op of the core instead of between them, and a core reader recomputing "
        "it out of place would draw twice. A random write after every compiled op is replayed as it is; one that "
        "compiled code follows or reads is cut after (Note [Segments]).",
        "fallback_rules.py",
        "draws random numbers after a view is taken",
    )
    WRITE_TO_A_BASE_THE_CORE_MAY_SAVE = FallbackReason(
        "a write to a base after its views are taken, when a differentiable op of the compiled region may save that "
        "base for backward, where the program cannot be cut in two after the mutation (Note [Segments])",
        "`<mutation> writes to <graph input or intermediate> <base> after the views are taken, and <node> (<op>) of "
        "the compiled region may save it, or a value computed from it, for backward`",
        "the core is one opaque autograd node whose saved tensors the partitioner chooses; the replayed write would "
        "bump the version of a tensor the compiled backward checks, an error eager does not raise (or one that cannot "
        "name eager's node). Where the saving op comes after the write, the program is cut there instead.",
        "fallback_rules.py",
        "of the compiled region may save it",
    )
    NO_GRAD_VIEW_READ_WITH_GRAD = FallbackReason(
        "a compiled op, run with grad mode on, that reads a view taken under no_grad of a tensor that requires grad",
        "`<node> (<op>) reads <view>, taken under no_grad from a tensor that requires grad: eager's result takes "
        "requires_grad (from an op that returns its input, gradients too) from that tensor, the compiled region's "
        "would not`",
        "eager's view inherits requires_grad from its base; the compiled region computes it below autograd. The "
        "program is cut after the view (the next segment gets eager's own); it falls back only where the cut is "
        "refused (Note [Segments]). Note [A view taken under no_grad keeps its base's requires_grad].",
        "fallback_rules.py",
        "from that tensor, the compiled region's",
    )
    NO_GRAD_VIEW_AT_GRAPH_BREAK = FallbackReason(
        "a graph that ends at a graph break and returns a view taken under no_grad of a tensor that requires grad, "
        "unless the graph and the break's instruction cannot write its base",
        "`output <k> (<view>) is a view taken under no_grad from a tensor that requires grad, and the graph ends at a "
        "graph break: Dynamo would crash wrapping it for the next graph if its base is written in place in between`",
        "eager forbids reading such a view's grad_fn once its base is written in place, and Dynamo reads is_leaf "
        "wrapping it for the next graph, a crash where eager runs; stock's view is allowed (replayed where stock's "
        "compile fails: Note [Stock's views across a graph break]). Same Note; Note [What runs between two graphs].",
        "fallback_rules.py",
        "the graph ends at a graph break",
    )
    MULTI_OUTPUT_VIEW_AT_GRAPH_BREAK = FallbackReason(
        "a graph that ends at a graph break and returns a replayed view from a multi-output view call, unless the "
        "graph and the break's instruction cannot write its base",
        "`output <k> (<view>) is a view from a multi-output view call, returned by a graph that stops at a graph "
        "break: Dynamo would crash wrapping it for the next graph if the code between the graphs wrote its base "
        "<base> in place`",
        "eager refuses the grad_fn of a multi-output view once its base is written in place; Dynamo reads is_leaf "
        "wrapping the view for the resume function: a crash where eager raises only if grad_fn is read (fuzzer "
        "s41_47). Only where that code can reach the base and may write it, and stock compiles the graph.",
        "graph_break_rules.py",
        "is a view from a multi-output view call, returned by a graph that stops",
    )
    DROPOUT_LAYOUT_AT_GRAPH_BREAK = FallbackReason(
        "a graph ending at a graph break that returns a replayed p=0 or eval dropout of an input laid out unlike it",
        "`output <k> (<node>) crosses a graph break and comes from <dropout>, which returns its input in eager where "
        "Dynamo's fake allocates: the code Dynamo traced after the break assumed the fake's layout`",
        "eager's layout (an expanded or offset input) would reach code traced on the fake's and raise where stock "
        "runs (s905_79, the ceiling too); Note [Dynamo's example values at a graph break].",
        "graph_break_rules.py",
        "which returns its input in eager where Dynamo's fake allocates",
    )
    NO_GRAD_VIEW_OF_INPUT_AFTER_GRAPH_BREAK = FallbackReason(
        "a call of a graph Dynamo resumed after a graph break that returns a view taken under no_grad of an input "
        "sharing storage with a view stock returned for a graph that fell back",
        "`output <k> (<view>) is a view taken under no_grad of input <input>, which requires grad, in a graph Dynamo "
        "resumed after a graph break: where the graph before fell back, that input is stock's view, which the caller "
        "may write in place, and eager's view of it would then refuse its grad_fn`",
        "a faithful no_grad view of stock's view raises on grad_fn after a write stock's answers (s31_447); other "
        "calls replay, all of them where stock's compile fails (Note [Stock's views across a graph break]).",
        "fallback_rules.py",
        "in a graph Dynamo resumed after a graph break",
    )
    CORE_WRITES_THROUGH_A_VIEW = FallbackReason(
        "a base the epilogue views, or a value returned as is, that the compiled region writes through a full view",
        "`the compiled region writes to <base> through a view (<mutation>), and the epilogue views it` (or `and "
        "returns it, which eager returns as no view`) `: AOTAutograd would return it as an alias of its own base`",
        "AOTAutograd regenerates it as a view of the functional result. Cut before the write instead (Note [A write "
        "through a view of a base the epilogue views]), but for a hidden write to a storage a recorded node saved.",
        "output_rules.py",
        "AOTAutograd would return it as an alias of its own base",
    )
    UNREPRODUCED_OUTPUT_ALIAS = FallbackReason(
        "an output that aliases an input or another output in the trace but that no replayable view call produces",
        "`output <k> (<node>, <op>) aliases <input or output> in the trace, but no view call the epilogue can replay "
        "produces it`",
        "the core would return it as AOTAutograd regenerates it, not as eager made it (Note [The invariant]).",
        "output_rules.py",
        "the epilogue can replay produces it",
    )
    VIEW_FN_WRITE_UNDER_COMPILED_AUTOGRAD = FallbackReason(
        "a write replayed through a `view_as_real`, `view_as_complex` or `conj` view, with compiled autograd on",
        "`<mutation> writes through <view> (<op>), whose eager autograd node replays views through a view_fn, which "
        "compiled autograd (on) rejects`",
        "eager's `CopySlices` replays such a view chain through a view_fn, which 2.13's compiled autograd rejects "
        '(test_autograd_inplace_views_cross_dtype, dynamo-wrapped); Dynamo with `backend="eager"` fails the same.',
        "fallback_rules.py",
        "which compiled autograd (on) rejects",
    )
    SAVED_INPUT_VIEW_UNDER_COMPILED_AUTOGRAD = FallbackReason(
        "a compiled op that saves for backward a view of an input the epilogue views too, with compiled autograd on",
        "`an op of the compiled region saves a view of input <i> for backward, which the epilogue views too: with "
        "compiled autograd on, no pre-hook checks that input's version where the compiled backward may not`",
        "eager's backward raises if the input is written before it; the partitioner may save a value computed from "
        "the view instead (stock's graph returns the view and saves it), and the runtime's check is a pre-hook, "
        "which compiled autograd does not run (Note [A saved view of an input the epilogue views]).",
        "version_watches.py",
        "no pre-hook checks that input's version",
    )
    INFERENCE_MODE_IN_GRAPH = FallbackReason(
        "an `inference_mode` region inside a Dynamo graph",
        "`an inference_mode region inside the graph` (Dynamo path)",
        "pre-dispatch tracing runs `_enter_inference_mode` without recording it: the core would run it with autograd.",
        "capture.py",
        "an inference_mode region inside the graph",
    )
    AUTOGRAD_FUNCTION_IN_GRAPH = FallbackReason(
        "a custom `autograd.Function` that marks an input dirty (`ctx.mark_dirty`), where the program cannot be cut "
        "around the call to run it in eager between two compiled segments (Note [Segments]), or marks a nested input",
        "`a custom autograd.Function marks an input dirty (an in-place write inside an op the core keeps opaque)`",
        "a dirty input is an in-place write inside an opaque node (Note [Custom autograd.Functions in the core]), so "
        "the call runs in eager; the cut is refused where the write bumps a tensor the segment before may save.",
        "capture.py",
        "marks an input dirty",
    )
    INPUT_WRITE_ITS_BACKWARD_READS = FallbackReason(
        "an in-place write to a graph input whose backward reads the value it overwrites (`x.mul_(w)`, `x.sin_()`), "
        "where the program cannot be cut around the write to run it in eager (Note [Segments])",
        "`<node> writes graph input <input>, recorded by autograd, and its backward reads the value it overwrites`",
        "AOTAutograd saves the input and writes it after the compiled region: its backward raises where eager's, "
        "which saved a copy, runs (stock raises the same; Note [A write to an input its own backward reads]).",
        "fallback_rules.py",
        "recorded by autograd, and its backward reads",
    )
    WRITE_TO_A_VALUE_A_BACKWARD_SAVED = FallbackReason(
        "a write to a value an earlier node saved for backward, where the inner backend's backward trace raised the "
        "version error and the program cannot be cut around the write (Note [Segments])",
        "`<node> (<op>) writes a value <node> saved for backward, and the inner backend's backward trace raised ...`",
        "eager raises the error only in a backward that reaches the saving node; compiled whole, AOTAutograd raises "
        "it while compiling (Note [A write to a value a backward saved]).",
        "saved_value_rules.py",
        "saved for backward, and the inner backend's backward trace",
    )
    AUTOGRAD_FUNCTION_RETURNS_AN_INPUT = FallbackReason(
        "a custom `autograd.Function` whose forward returns an input or a view of one, where the program cannot be "
        "cut around the call to run it in eager (Note [Segments]); a checkpointed region returning an input (Dynamo)",
        "`a custom autograd.Function returns an input (eager returns a view of it, with its own backward; AOTAutograd "
        "would regenerate it from the input around that backward)`",
        "eager's result is a view of the input whose grad_fn is the Function's backward; AOTAutograd regenerates an "
        "output that aliases an input from the input itself, outside the compiled Function.",
        "capture.py",
        "returns an input (eager returns a view of it",
    )
    INLINED_AUTOGRAD_FUNCTION = FallbackReason(
        "a custom `autograd.Function` whose forward Dynamo inlined (no input required grad), in a graph where the "
        "input it returns could show: an output aliasing an input, a written input, a metadata mutation",
        "`Dynamo inlined the forward of autograd.Function <name> (no input requires grad): an input it returns would "
        "be the input itself, where eager's is a view of it`",
        "without grad Dynamo inlines the forward, returning an input as itself; eager's apply returns a view. The "
        "backend rewrites such calls (Note [An inlined Function returns its input as eager does]); this is the rest "
        "(another container, a non-input output requiring grad).",
        "capture.py",
        "Dynamo inlined the forward of autograd.Function",
    )
    CAPTURE_FAILED = FallbackReason(
        "a program the pre-dispatch capture cannot trace (compile_function then runs it eagerly)",
        "`pre-dispatch capture failed: ...`",
        "the graph cannot be traced at the pre-dispatch level (an op or a Dynamo construct the tracer lacks).",
        "pipeline.py",
        "pre-dispatch capture failed",
    )
    CORE_COMPILE_FAILED = FallbackReason(
        "a core the inner backend fails to compile",
        "`compiling the core raised ...`",
        "the core is not the user's program: it returns bases the program only viewed (perhaps under `no_grad`), so "
        "AOTAutograd can trace a backward the program never asks for; stock decides.",
        "pipeline.py",
        "compiling the core raised",
    )
    REQUIRES_GRAD_IN_FUNCTION = FallbackReason(
        "compile_function only: `requires_grad_(False)` on a traced tensor inside the function",
        "`requires_grad_(False) inside the function is not recorded by the trace`",
        "the trace records nothing (`requires_grad_(True)` runs in eager: Note [requires_grad_ inside a function]).",
        "function_capture.py",
        "requires_grad_(",
    )
    BACKWARD_IN_FUNCTION = FallbackReason(
        "compile_function only: a backward pass (`backward`, `autograd.grad`) inside the function",
        "`a backward pass inside the function (<call>) is not recorded by the trace`",
        "make_fx cannot record a backward pass of the traced program as part of its forward.",
        "function_capture.py",
        "a backward pass inside the function",
    )
    NON_STRIDED_INPUT = FallbackReason(
        "compile_function only: a sparse (not strided) tensor input",
        "`an input of layout <layout>: the capture traces strided tensors`",
        "the capture fakifies strided tensors and keys its cache on storages and strides, which sparse layouts lack "
        "(OpInfo's sparse.sampled_addmm); Dynamo breaks the graph on such inputs instead.",
        "compile_function.py",
        "the capture traces strided tensors",
    )
    SETS_RNG = FallbackReason(
        "compile_function only: setting the random generator (`torch.manual_seed`, `set_rng_state`) in the function",
        "`the function sets the random number generator (...): the trace does not record it`",
        "the trace records no call that seeds, so the compiled function would draw from the caller's state (OpInfo's "
        "`wrapper_set_seed`); Dynamo breaks the graph there instead.",
        "function_capture.py",
        "sets the random number generator",
    )
    HOOKS_IN_FUNCTION = FallbackReason(
        "compile_function only: a hook (`register_hook`, `retain_grad`) on a traced tensor",
        "`<call> inside the function: hooks on traced tensors are lost`",
        "hooks registered on fake tensors during the trace never reach the real outputs.",
        "function_capture.py",
        "hooks on traced tensors are lost",
    )
    INFERENCE_MODE_IN_FUNCTION = FallbackReason(
        "compile_function only: an `inference_mode` region inside the function",
        "`an inference_mode region inside the function is not recorded by the trace`",
        "as for the Dynamo path: the region would be compiled with autograd on.",
        "function_capture.py",
        "an inference_mode region inside the function",
    )
    INPUT_METADATA_MUTATION_IN_FUNCTION = FallbackReason(
        "compile_function only: a metadata mutation (`t_`...) of a view of an input, before an op that may save that "
        "input, where the cut around it is refused (it runs in eager between compiled segments otherwise)",
        "`a metadata mutation of an input (<op> of <input>) inside the function`",
        "AOTAutograd applies it after the compiled region, bumping the version of inputs the region saved for "
        "backward after that point; Dynamo graph-breaks at the same call.",
        "fallback_rules.py",
        "a metadata mutation of an input",
    )
    INPUT_METADATA_MUTATION = FallbackReason(
        "compile_function only: a metadata mutation of an input itself (not of a view of it), where the cut around it "
        "is refused (it runs in eager between two compiled segments otherwise, as at Dynamo's graph break)",
        "`an input's own metadata mutation (<op> of <input>): Dynamo breaks the graph there, and AOTAutograd would "
        "apply it after the compiled region in one step (or not at all), not with eager's version bumps`",
        "the version counter it shares with its aliases then differs from eager's: a grad_fn not regenerated "
        "(s41_188), a stale saved tensor (s53_604), a zero gradient (s52_634). Under Dynamo it is a graph break.",
        "fallback_rules.py",
        "an input's own metadata mutation",
    )
    BOUND_APPLY_IN_FUNCTION = FallbackReason(
        "compile_function only: an `autograd.Function` called through an `apply` bound earlier (`op = F.apply`)",
        "`autograd.Function <name> was applied through an apply bound before the capture: its backward would be lost`",
        "the capture records a Function whose `apply` is looked up in the call; a bound one inlines the forward, and "
        "the compiled backward would differentiate it instead of calling the Function's backward.",
        "function_capture.py",
        "applied through an apply bound before the capture",
    )
    REBINDS_MODULE_STATE = FallbackReason(
        "compile_function only: a function that rebinds a parameter or buffer of its module",
        "`the function rebinds <parameter or buffer> (a traced value would be kept)`",
        "the trace would store a fake value where the module keeps its state.",
        "compile_function.py",
        "the function rebinds",
    )
    CAPTURED_GRAPH_COMPILE_FAILED = FallbackReason(
        "compile_function only: a captured graph that fails to compile",
        "`compiling the captured graph failed: ...`",
        "eager then runs the function (and raises its own error, if it is wrong in eager).",
        "compile_function.py",
        "compiling the captured graph failed",
    )
    RESTRICTED_VIEW_WRITTEN = FallbackReason(
        "a graph that writes an alias of its input, a view autograd forbids rebasing: that call runs uncompiled",
        "`input <k> is a view autograd forbids rebasing, and the graph writes an alias of it: the graph runs "
        "uncompiled for such calls`",
        "AOTAutograd writes the input in the caller's grad mode, raising eager's view+inplace error where eager "
        "does not; the epilogue replays such writes where it can. Note [A restricted view aliased by a write].",
        "inner_backend.py",
        "runs uncompiled for such calls",
    )
    UNFAITHFUL_TRACE_IN_FUNCTION = FallbackReason(
        "compile_function only: a write over its own input in another layout (`torch.sin(x.t(), out=x)`), unless cut "
        "around, or a metadata mutation of a dropout that returns its input",
        "`<op> writes <out>, which overlaps its input <input>` or `<op> of <dropout>, which is its input itself in "
        "eager but a fresh tensor in the trace`, then `: the trace cannot reproduce it`",
        "eager raises or computes in its iteration order (a functional graph reads every element first); eager "
        "resizes the input, the trace a copy (fuzzer s1402_547, s1501_1617).",
        "function_rules.py",
        "the trace cannot reproduce it",
    )
    RESTRICTED_VIEW_WRITTEN_IN_FUNCTION = FallbackReason(
        "compile_function only: the same, for the function's own inputs (it runs eagerly)",
        "`input <k> is a view autograd forbids rebasing, and the function writes an alias of it`",
        "as above; the trace is keyed on which inputs are such views, so other calls still compile.",
        "compile_function.py",
        "the function writes an alias of it",
    )
    INNER_BACKEND_REJECTED = FallbackReason(
        "a graph the inner backend fails to compile where eager runs it (inputs sharing storage, views an earlier "
        "graph returned; a version-counter error or a missing derivative eager raises only in backward; a view's lazy "
        "error eager raises only where it is read; a random draw nothing reads, kept): it runs uncompiled",
        "`the inner backend raised <error> on inputs that share storage (...)`, `... while tracing the backward "
        "(...)`, `... reading the grad_fn of a view ...` or `... on a random draw ...`: `the graph runs uncompiled`",
        'uncompiled is Dynamo with `backend="eager"`, eager\'s own behaviour (Note [Graphs the inner backend '
        "rejects]): AOTAutograd's synthetic-base path raises on aliased inputs only the prototype hands over (2.13, "
        "dynamic shapes; s62_92); its joint trace raises eager's backward errors (s1809_550: no derivative for a "
        "`copy` in compiled autograd's graph) and lazy view errors early; its partitioner "
        "refuses a dead multi-output draw kept as eager draws it (2.13, 2.14.1; s1808_1837).",
        "inner_backend.py",
        "the graph runs uncompiled (Note [Graphs the inner",
    )
    EVERY_OP_RUNS_IN_EAGER = FallbackReason(
        "a graph whose every computing op must run in eager, leaving only views to compile: it runs uncompiled",
        "`<reason>; cut around <node>, nothing but views would be compiled: every op that computes runs in eager, ...`",
        "stock's is no faster and often wrong (Note [A graph whose every computing op runs in eager]).",
        "inner_backend.py",
        "every op that computes runs in eager, and the graph runs uncompiled",
    )
    INTERNAL_ERROR = FallbackReason(
        "an internal error of the pipeline",
        "`internal error in the view-replay pipeline: ...`",
        "any exception in selection, functionalization or slicing: an engine limitation never breaks what stock runs.",
        "inner_backend.py",
        "internal error in the view-replay pipeline",
    )


@dataclass(frozen=True)
class Fallback:
    """A program (or one call of it) that is not replayed: which kind of reason, and the message logged."""

    kind: FallbackKind
    reason: str
    # Note [Segments]: the node to cut the program after (None: no cut helps), or around (it runs in eager itself).
    cut_after: Any = field(default=None, compare=False, repr=False)
    run_eagerly: bool = field(default=False, compare=False, repr=False)
    eagerly_through: Any = field(default=None, compare=False, repr=False)  # run_eagerly: from cut_after to this node


FALLBACK_REASONS: tuple[FallbackReason, ...] = tuple(kind.value for kind in FallbackKind)
