"""Benchmarks that reproduce the paper's figures beside the baselines; run from the repository root.

Each is a module, ``python -m benchmarks.<name> --help``; it prints what it measured in one run and
writes ``benchmarks/results/<name>.md`` (+ JSON / PNG) with the command that made it.
"""
