"""Benchmarks of a running engine: prompts, the runner, statistics, the store of runs, the
report, and which engine is measured (target)."""
