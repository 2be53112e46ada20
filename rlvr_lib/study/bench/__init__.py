"""Benchmarks of the RL loop against reference implementations."""
