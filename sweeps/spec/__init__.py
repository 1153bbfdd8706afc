"""The spec of a sweep: its file (parsing, overrides, validation), its search space, its packs
of trials and its ``table:`` block. Imports nothing else of ``sweeps``."""
