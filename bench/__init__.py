"""Benchmarks: each measures the broker against a baseline in the same run and prints ratios.

Run one with ``python -m bench.<name>`` (see the Makefile's ``bench`` targets).
"""
