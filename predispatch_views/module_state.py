"""compile_function's view of the modules a function owns: their parameters and buffers are looked up by name
on every call, and a trace that rebinds one is undone."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def owned_modules(fn: Callable[..., Any]) -> list[tuple[str, nn.Module]]:
    """The module compiled, the module a bound method belongs to, and modules in the closure or named globals."""
    found: dict[int, tuple[str, nn.Module]] = {}

    def add(name: str, value: Any) -> None:
        if isinstance(value, nn.Module) and id(value) not in found:
            found[id(value)] = (name, value)

    add("self", fn)
    add("self", getattr(fn, "__self__", None))
    code_fn = fn.forward if isinstance(fn, nn.Module) else getattr(fn, "__func__", fn)
    if isinstance(code_fn, types.MethodType):
        code_fn = code_fn.__func__
    if isinstance(code_fn, types.FunctionType):
        for name, cell in zip(code_fn.__code__.co_freevars, code_fn.__closure__ or ()):
            try:
                add(name, cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        for name in code_fn.__code__.co_names:
            add(name, code_fn.__globals__.get(name))
    return list(found.values())


State = dict[int, tuple[nn.Module, str, str, torch.Tensor]]  # id(tensor) -> (owner, name, kind, tensor)


def training_flags(owners: list[tuple[str, nn.Module]]) -> tuple[bool, ...]:
    # Every submodule: ``model.dropout.eval()`` changes what the trace would record as much as ``model.eval()``.
    return tuple(m.training for _, owner in owners for m in owner.modules())


def module_state(owners: list[tuple[str, nn.Module]]) -> State:
    state: State = {}
    for _, module in owners:
        for name, p in module.named_parameters(remove_duplicate=False):
            state.setdefault(id(p), (module, name, "parameter", p))
        for name, b in module.named_buffers(remove_duplicate=False):
            state.setdefault(id(b), (module, name, "buffer", b))
    return state


def restore_module_state(owners: list[tuple[str, nn.Module]], state: State) -> str | None:
    """Put back any parameter or buffer the trace rebound (to a fake value); name the first one."""
    rebound = None
    for module, name, kind, tensor in state.values():
        current = module.get_parameter(name) if kind == "parameter" else module.get_buffer(name)
        if current is not tensor:
            owner_name, _, attr = name.rpartition(".")
            setattr(module.get_submodule(owner_name), attr, tensor)
            rebound = rebound or f"{kind} {name}"
    return rebound


def getter(
    tensor: torch.Tensor, owners: list[tuple[str, nn.Module]], state: State
) -> Callable[[], torch.Tensor | None]:
    owned = state.get(id(tensor))
    if owned is None:
        return lambda: tensor
    module, name, kind, _ = owned
    lookup = module.get_parameter if kind == "parameter" else module.get_buffer

    def get() -> torch.Tensor | None:
        try:
            return lookup(name)
        except AttributeError:  # deleted or no longer a parameter/buffer: retrace
            return None

    return get
