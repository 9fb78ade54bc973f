"""pylog's benchmark suite: speed goals measured side by side in one run, reported as medians and ratios.

Run it with ``bash jobs/dev bench`` (all sections) or ``bash jobs/dev bench records storage`` (some).
Each section is a module in this package exposing ``run(quick: bool) -> list[Result]``; ``quick`` shrinks the
data so the whole suite can be smoke-tested in seconds (the tests do that, so the benchmarks never rot).
"""
