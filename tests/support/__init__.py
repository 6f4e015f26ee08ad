"""Helpers the test tiers and the benchmarks share (no tests here)."""
