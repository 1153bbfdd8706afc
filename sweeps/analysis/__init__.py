"""A sweep's results read back: trials from MLflow, scaling tables, power-law fits, convergence
labels, plots and the findings report. Imports ``sweeps.spec``, nothing of the runtime."""
