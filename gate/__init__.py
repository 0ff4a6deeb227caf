"""specguard: a merge gate for speculative decoding.

See ``docs/architecture.md`` for the stages and the types that pass between them.
"""

__version__ = "0.1.0"
