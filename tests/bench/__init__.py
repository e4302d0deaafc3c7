"""Tests of the benchmarks' bookkeeping (they never run a benchmark)."""
