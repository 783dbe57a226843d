"""The shared trainer: distillation methods on accelerate, using opsd_diag's signal code."""
