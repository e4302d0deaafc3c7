"""Tests of inference/: GGUF parsing, templates, the estimator, planner, runner and CPU kernels."""
