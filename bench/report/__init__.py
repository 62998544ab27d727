"""BENCHMARKS.md: the report's typed rows, the claims computed from them, the curves and the
Markdown rendered from them (`python -m bench.run` writes the report).
"""
