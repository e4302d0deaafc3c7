"""Benchmarks: run with `python -m bench.NAME`, never as tests; each writes its results (bench/results.py)."""
