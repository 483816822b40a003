"""Delayed operations: a hierarchical timing wheel and the purgatory that parks requests on it."""
