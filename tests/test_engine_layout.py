"""The engine's layout (issue 23): private torch APIs only behind predispatch_views/_torch_internals/, and no
engine module over 400 lines. The engine is the package's top-level modules; compare/ is the comparison harness
(it drives Dynamo and OpInfo, torch's test internals, by design) and is not checked here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "predispatch_views"
INTERNALS = PACKAGE / "_torch_internals"
MAX_LINES = 400
# Private members of public torch classes the engine reads (Tensor, OpOverload): only _torch_internals may.
PRIVATE_MEMBERS = {"_is_view", "_cdata", "_schema", "_op", "_view_func", "_get_creation_meta"}


def _engine_modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py")) + sorted(INTERNALS.glob("*.py"))


def _is_private_torch_module(name: str) -> bool:
    parts = name.split(".")
    private = any(p.startswith("_") for p in parts[1:]) or name.startswith("torch.multiprocessing")
    return parts[0] == "torch" and private


def private_api_uses(source: str) -> list[str]:
    """Imports of private torch modules, ``torch._x`` attribute chains, and reads of private members."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_private_torch_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_private_torch_module(node.module or ""):
            found.append(str(node.module))
        elif isinstance(node, ast.Attribute):
            chain = ast.unparse(node)
            if (chain.startswith("torch._") and not chain.startswith("torch.__")) or node.attr in PRIVATE_MEMBERS:
                found.append(f"line {node.lineno}: {chain}")
    # ``torch._C._f`` holds ``torch._C``: keep the longest chain of each line.
    return [f for f in found if not any(g != f and g.startswith(f) for g in found)]


def test_the_check_finds_private_uses() -> None:
    source = (
        "import torch._dynamo\nfrom torch.utils._pytree import tree_leaves\n"
        "from torch.multiprocessing.reductions import StorageWeakRef\n"
        "y = torch._C._set_grad_enabled\nz = t._is_view()\nw = op._schema\nv = torch.compile\n"
    )
    assert len(private_api_uses(source)) == 6  # everything but torch.compile


def test_only_torch_internals_touches_private_torch_apis() -> None:
    offenders = {}
    for path in _engine_modules():
        if path.parent == INTERNALS:
            continue
        if uses := private_api_uses(path.read_text()):
            offenders[path.name] = uses
    assert offenders == {}


def test_no_engine_module_over_400_lines() -> None:
    long = {p.name: n for p in _engine_modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
