"""Benchmarks: run with `python -m bench.NAME`, never as tests; each writes what it measured (bench/results.py)."""
