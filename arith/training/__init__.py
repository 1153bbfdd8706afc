"""Training: ``train(config, report) -> summary``, its loop, optimiser, stopping, checkpoints,
hardware and cost, packs of members, and what a run records as it goes (diagnostics).

Imports every stage before it; nothing but the run config and the commands imports it.
"""
