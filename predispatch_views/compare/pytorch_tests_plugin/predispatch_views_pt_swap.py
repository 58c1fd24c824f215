"""The ``swapped`` mode of the PyTorch-test runner: a test file's own compile entry points routed through the prototype.

Files such as ``test/functorch/test_aotdispatch.py`` test AOTAutograd itself: their tests call ``aot_function``,
``aot_module`` and ``torch.compile(backend="aot_eager")`` and check the result against eager (outputs, gradients,
input mutations, view relationships, errors). Running them dynamo-wrapped compiles the test body a second time
around those calls, which PyTorch's CI does not do either. The meaningful comparison swaps the compiler the test
itself asks for, keeping everything the test configured:

- ``torch.compile`` / ``torch._dynamo.optimize`` with an AOTAutograd-based backend (``"aot_eager"``,
  ``"aot_eager_decomp_partition"``, ``"aot_eager_default_partitioner"``, ``"inductor"``, the default, or an
  ``aot_autograd(...)`` backend object) get ``predispatch_views.backend(that backend)``: the prototype in front, the
  test's backend as its inner backend and as the stock fallback. ``mode``/``options`` stay with inductor.
  Other backends (``"eager"``, counting backends) are left alone: there is no AOTAutograd to put the prototype in
  front of.
- ``aot_function(fn, fw_compiler, ...)`` and ``aot_module(mod, ...)`` bound in the test module (also as
  ``compiled_function``/``compiled_module``) get
  ``predispatch_views.compile_function(fn, inner=aot_autograd(fw_compiler=..., ...))``: the prototype's no-Dynamo
  entry point, whose core is compiled by the AOTAutograd configuration the test asked for (its compilers,
  partitioner, decompositions), with ``dynamic=`` forwarded (Note [compile_function with symbolic sizes]).
- Left stock: ``aot_module_simplified`` (the backend-level API the prototype itself sits in front of; it is handed
  graphs that Dynamo did not capture), ``aot_export_*``, ``make_fx``, functionalization APIs.

``calls()`` counts how often the prototype compiled or ran for the test (the plugin logs it per test as
``reached``); a test with 0 ran exactly as under stock, so its outcome compares nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

AOT_BACKENDS = ("aot_eager", "aot_eager_decomp_partition", "aot_eager_default_partitioner", "inductor")
# torch's entry points whose bindings in a test file are swapped (under whatever name the file bound them).
SWAPPED_NAMES = ("aot_function", "aot_module")
SWAP_MARK = "__predispatch_views_swapped__"

_calls = 0


def calls() -> int:
    return _calls


def _count() -> None:
    global _calls
    _calls += 1


def _counting_backend(inner: Any) -> Callable[..., Any]:
    import predispatch_views

    prototype = predispatch_views.backend(inner)

    def backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        _count()
        return prototype(gm, example_inputs)

    return backend


def _is_aot_backend_object(backend: Any) -> bool:
    from torch._dynamo.backends.common import AotAutograd

    return isinstance(backend, AotAutograd)


def swap_backend(backend: Any, mode: Any = None, options: Any = None, dynamic: Any = None) -> Any:
    """The backend the prototype strategy hands torch.compile instead of ``backend``, or ``backend`` itself."""
    import torch

    if getattr(backend, SWAP_MARK, False):
        return backend
    if backend == "inductor" and (mode is not None or options is not None):
        inner: Any = torch._TorchCompileInductorWrapper(mode, options, dynamic)
    elif backend in AOT_BACKENDS if isinstance(backend, str) else _is_aot_backend_object(backend):
        inner = backend
    else:
        return backend
    swapped = _counting_backend(inner)
    setattr(swapped, SWAP_MARK, True)
    return swapped


def _swap_compile(torch: ModuleType) -> None:
    original = torch.compile
    if getattr(original, SWAP_MARK, False):
        return

    @functools.wraps(original)
    def compile(model: Any = None, **kwargs: Any) -> Any:
        backend = kwargs.get("backend", "inductor")
        swapped = swap_backend(backend, kwargs.get("mode"), kwargs.get("options"), kwargs.get("dynamic"))
        if swapped is not backend:
            kwargs = {k: v for k, v in kwargs.items() if k not in ("mode", "options")}
            kwargs["backend"] = swapped
        return original(model, **kwargs) if model is not None else original(**kwargs)

    setattr(compile, SWAP_MARK, True)
    torch.compile = compile  # type: ignore[assignment]


def _swap_optimize(dynamo: ModuleType) -> None:
    original = dynamo.optimize
    if getattr(original, SWAP_MARK, False):
        return

    @functools.wraps(original)
    def optimize(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (swap_backend(args[0]), *args[1:])
        elif "backend" in kwargs:
            kwargs["backend"] = swap_backend(kwargs["backend"])
        return original(*args, **kwargs)

    setattr(optimize, SWAP_MARK, True)
    dynamo.optimize = optimize  # type: ignore[attr-defined]


def _aot_inner(*args: Any, **kwargs: Any) -> Any:
    """An ``aot_autograd(...)`` backend with the compilers an ``aot_function(fn, *args, **kwargs)`` call names."""
    from torch._dynamo.backends.common import aot_autograd

    names = ("fw_compiler", "bw_compiler", "partition_fn", "decompositions", "num_params_buffers")
    config = dict(zip(names, args, strict=False))
    config.update(kwargs)
    for unsupported in ("num_params_buffers", "dynamic", "enable_log", "_disable_torch_fn_metadata_mode"):
        config.pop(unsupported, None)
    return aot_autograd(**{k: v for k, v in config.items() if v is not None})


def _counting(compiled: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compiled)
    def run(*args: Any, **kwargs: Any) -> Any:
        _count()
        return compiled(*args, **kwargs)

    return run


def swapped_aot_function(fn: Any, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``aot_function(fn, fw_compiler, ...)`` through the prototype's ``compile_function``."""
    import predispatch_views

    dynamic = bool(kwargs.get("dynamic", False))
    return _counting(predispatch_views.compile_function(fn, inner=_aot_inner(*args, **kwargs), dynamic=dynamic))


def swapped_aot_module(mod: Any, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """``aot_module(mod, fw_compiler, ...)`` through ``compile_function`` (an nn.Module's parameters become inputs)."""
    import predispatch_views

    dynamic = bool(kwargs.get("dynamic", False))
    return _counting(predispatch_views.compile_function(mod, inner=_aot_inner(*args, **kwargs), dynamic=dynamic))


_replacements: dict[int, Callable[..., Any]] = {}


def _replacement_table() -> dict[int, Callable[..., Any]]:
    """id(torch's aot_function / aot_module) -> the swapped entry point, taken once, before any module is patched."""
    if not _replacements:
        from torch._functorch import aot_autograd

        originals = (aot_autograd.aot_function, aot_autograd.aot_module)
        _replacements.update(zip(map(id, originals), (swapped_aot_function, swapped_aot_module), strict=True))
        _keep_alive.extend(originals)
    return _replacements


_keep_alive: list[Any] = []  # the originals, so that their ids stay theirs


def install_in_module(module: ModuleType) -> list[str]:
    """Swap every global of ``module`` bound to torch's ``aot_function``/``aot_module`` (under any name:
    functorch.compile also exports them as ``compiled_function``/``compiled_module``); return the names swapped."""
    table = _replacement_table()
    swapped_names = []
    for name, value in list(vars(module).items()):
        replacement = table.get(id(value))
        if replacement is not None:
            setattr(module, name, replacement)
            swapped_names.append(name)
    return sorted(swapped_names)


def install_global() -> None:
    """Swap the entry points reached through torch's modules: torch.compile, torch._dynamo.optimize, and the
    aot_function/aot_module bindings of torch._functorch.aot_autograd and functorch.compile (a test that imports
    them inside its body gets the swapped ones)."""
    import functorch.compile
    import torch
    import torch._dynamo
    from torch._functorch import aot_autograd

    _replacement_table()
    _swap_compile(torch)
    _swap_optimize(torch._dynamo)
    install_in_module(aot_autograd)
    install_in_module(functorch.compile)
