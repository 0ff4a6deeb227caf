"""Delivery to CI: did a change touch what the gate guards (:mod:`gate.ci.changed`), the GitHub client and the
publisher.  Light dependencies only (no torch, transformers, numpy or scipy): the hosted ``changed`` job and the
comment step run it without them (``tests/test_layers.py`` enforces it).
"""
