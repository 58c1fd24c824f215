"""What a case is, and how its inputs are built: shared by the case library (cases.py) and the ported upstream
cases (cases_upstream.py), which both register cases; kept apart so that neither imports the other's module for
them (no import circle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Inputs:
    """One call's arguments, and the leaf tensors whose ``.grad`` the backward probes read."""

    args: tuple[Any, ...]
    leaves: tuple[torch.Tensor, ...]
    # Tensors the program may alias or mutate without being an argument (the base of a view input...): the
    # probes watch their values and version counters too.
    extra: tuple[torch.Tensor, ...] = ()


InputFactory = Callable[[torch.Generator, str], Inputs]


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    inputs: InputFactory
    fast: bool = False
    slow: bool = False
    note: str = ""
    # nn.Module cases: the module for a device (seeded, built once); it is the program and its parameters'
    # .grad is reset before every call.
    module: Callable[[str], nn.Module] | None = None

    def program(self, device: str) -> Callable[..., Any]:
        return self.fn if self.module is None else self.module(device)

    def params(self, device: str) -> tuple[torch.Tensor, ...]:
        return () if self.module is None else tuple(self.module(device).parameters())


@dataclass(frozen=True)
class T:
    """How to build one tensor input."""

    shape: tuple[int, ...]
    requires_grad: bool = True
    dtype: torch.dtype = torch.float32

    def build(self, gen: torch.Generator, device: str) -> torch.Tensor:
        if self.dtype.is_floating_point or self.dtype.is_complex:
            t = torch.randn(self.shape, dtype=self.dtype, generator=gen)
        else:
            t = torch.randint(-8, 8, self.shape, dtype=self.dtype, generator=gen)
        t = t.to(device)
        return t.requires_grad_(self.requires_grad)


def tensors(*specs: T) -> InputFactory:
    def factory(gen: torch.Generator, device: str) -> Inputs:
        args = tuple(s.build(gen, device) for s in specs)
        return Inputs(args, tuple(a for a in args if a.requires_grad))

    return factory


def t(*shape: int, rg: bool = True, dtype: torch.dtype = torch.float32) -> T:
    return T(tuple(shape), rg, dtype)


CaseDecorator = Callable[..., Callable[[Callable[..., Any]], Callable[..., Any]]]


def registrar(into: list[Case]) -> CaseDecorator:
    """A ``@case(inputs, fast=..., slow=..., note=..., name=...)`` decorator that appends to ``into``."""

    def case(
        inputs: InputFactory, *, fast: bool = False, slow: bool = False, note: str = "", name: str | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            into.append(Case(name or fn.__name__, fn, inputs, fast=fast, slow=slow, note=note))
            return fn

        return register

    return case
