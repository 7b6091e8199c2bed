"""Benchmarks against real sandbox servers; each writes its section of BENCHMARKS.md."""
