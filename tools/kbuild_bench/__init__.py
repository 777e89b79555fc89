"""The benchmark harness of kernel projects (`benchmarks/benchmark_*.py`, `kbuild bench`).

A package of its own: it needs torch, which the builder itself does not. Scripts use
`from kbuild_bench import harness`.
"""
