"""specguard: a merge gate for speculative decoding.

The package is laid out along the data flow::

    config -> suite -> engines -> checks -> results -> (baseline) -> report

Each stage takes and returns plain data objects that serialise to JSON.
"""

__version__ = "0.1.0"
