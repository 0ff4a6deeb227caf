"""Documents and files: the versioned JSON base type, atomic writes and safe reads, the run directory.

The lowest layer: it imports nothing of the gate but :mod:`gate.errors` (``tests/test_layers.py``).
"""
