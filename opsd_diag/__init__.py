"""OPSD-Diag: diagnose on-policy (self-)distillation signals token by token before training."""

from opsd_diag.errors import OpsdError

__version__ = "0.1.0"
__all__ = ["OpsdError", "__version__"]
