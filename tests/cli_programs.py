"""Programs the command-line tests explain (importable as tests.cli_programs)."""

from __future__ import annotations

import torch


def raises(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.mul(2).reshape(7, -1).unbind(0)  # 3 x 4 elements do not reshape to 7 rows


def split_along(x: torch.Tensor, *, dim: int = 0, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
    return x.mul(scale).split(1, dim=dim)


NOT_A_FUNCTION = 3
