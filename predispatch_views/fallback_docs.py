"""The docs' fallback lists, rendered from fallbacks.FallbackKind: ``python -m predispatch_views.fallback_docs``
rewrites the blocks between ``<!-- fallbacks:NAME -->`` markers (tests/test_docs.py checks they are current)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .fallbacks import FALLBACK_REASONS


def render_list() -> str:
    return "\n".join(
        f"- {r.summary};" if i < len(FALLBACK_REASONS) - 1 else f"- {r.summary}."
        for i, r in enumerate(FALLBACK_REASONS)
    )


def render_table() -> str:
    rows = [f"| {r.logged} | {r.why} |" for r in FALLBACK_REASONS]
    return "\n".join(["| reason (as logged) | why it is needed |", "|---|---|", *rows])


# Which rendering each document holds.
DOCUMENTS = {"README.md": "list", "design/README.md": "list", "design/04-soundness.md": "table"}
RENDER = {"list": render_list, "table": render_table}


def block_pattern(kind: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- fallbacks:{kind} -->\n)(.*?)(<!-- /fallbacks:{kind} -->)", re.S)


def rendered_blocks(text: str, kind: str) -> list[str]:
    return [m.group(2) for m in block_pattern(kind).finditer(text)]


def sync(root: Path) -> list[str]:
    """Rewrite every document's blocks from the list; return the documents that changed."""
    changed = []
    for name, kind in DOCUMENTS.items():
        path = root / name
        text = path.read_text()
        body = RENDER[kind]() + "\n"
        new = block_pattern(kind).sub(lambda m, body=body: m.group(1) + body + m.group(3), text)
        if new != text:
            path.write_text(new)
            changed.append(name)
    return changed


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    print("\n".join(f"rewrote {name}" for name in sync(root)) or "up to date")
