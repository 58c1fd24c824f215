"""Every case of the library under eager, the backend and compile_function (both with the aot_eager inner).

    python scripts/compile_function_parity.py [NAME_SUBSTRING]

Prints, per case, the probes that match eager under ``prototype[aot_eager]`` (the Dynamo backend) and under
``compile_function(fn, inner="aot_eager")``, the fallback compile_function logged, and marks every case where
compile_function matches fewer probes than the backend (with the probes that differ). Until the fuzzer's
``prototype_fn`` strategy is in compare/strategies.py, this is the compile_function column of the report.
"""

from __future__ import annotations

import sys
import time

from predispatch_views import compile_function
from predispatch_views.compare.cases import CASES
from predispatch_views.compare.parity import compare, run_case
from predispatch_views.compare.probes import PROBES
from predispatch_views.compare.strategies import Strategy, eager, prototype


def main(pattern: str | None) -> int:
    function = Strategy("prototype_fn", "aot_eager", lambda fn: compile_function(fn, inner="aot_eager"))
    backend = prototype("aot_eager")
    selected = [c for c in CASES if pattern is None or pattern in c.name]
    matched = {"backend": 0, "compile_function": 0}
    full = {"backend": 0, "compile_function": 0}
    worse = []
    start = time.perf_counter()
    for case in selected:
        reference = run_case(case, eager())
        runs = {"backend": run_case(case, backend), "compile_function": run_case(case, function)}
        for label, run in runs.items():
            compare(reference, run)
            matched[label] += run.matched
            full[label] += run.matched == len(PROBES)
        b, f = runs["backend"], runs["compile_function"]
        fallback = f.fallbacks[0][1][:100] if f.fallbacks else ""
        mark = "  <-- WORSE" if f.matched < b.matched else ""
        print(f"{case.name:50s} backend {b.matched}/{len(PROBES)}  fn {f.matched}/{len(PROBES)}  {fallback}{mark}")
        if f.matched < b.matched:
            worse.append(case.name)
            for probe, d in f.divergences.items():
                if d is not None and b.divergences[probe] is None:
                    print(f"    {probe}{d.path}: eager {str(d.expected)[:200]} / fn {str(d.actual)[:200]}")
    total = len(selected) * len(PROBES)
    print(
        f"{len(selected)} cases in {time.perf_counter() - start:.0f} s; probes matching eager: "
        f"backend {matched['backend']}/{total}, compile_function {matched['compile_function']}/{total}; "
        f"cases matching on every probe: backend {full['backend']}, compile_function {full['compile_function']}; "
        f"compile_function worse than the backend on: {worse or 'none'}"
    )
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else None))
