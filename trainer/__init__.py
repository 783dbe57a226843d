"""The shared trainer: distillation methods on accelerate, using opsd_diag's signal code.

Entry points: ``opsd-train CONFIG [--out DIR] [--resume]`` (``python -m trainer``, or
``accelerate launch ... -m trainer`` for several processes) and, for the app, ``app.launch.start``
(the run is then a job of ``opsd_diag.jobs``: status, follow and stop live there).

Modules, one job each:

- ``config``     the training section resolved: inherited settings filled in, optional packages checked
- ``losses``     per-token losses of every method, built only from ``opsd_diag.core.signals``
- ``roles``      the trainable student and its teacher / base / initial partners (frozen, EMA, live, LoRA)
- ``rollouts``   which problems each step trains on, views, on-policy sampling per generation chunk
- ``step``       one micro-batch: forward, chunked loss, backward, normalised by the global token count
- ``evaluate``   held-out pass@1 / pass@k and the forgetting check
- ``checkpoint`` HF-format checkpoints with optimizer, scheduler and RNG state
- ``rundir``     the run directory: config.yaml, command.txt, metrics.jsonl, checkpoints
- ``setup``      load and check everything before the run directory is written
- ``loop``       the training loop on accelerate (logging, evaluation, saving, graceful stop)
- ``probes``     ``training.diagnose_every``: a probe (a small diagnosis) of the live policy every N steps
- ``trl_callback`` the same probes inside a TRL / ``transformers.Trainer`` run (``DiagnosisCallback``)
- ``cli``        ``opsd-train``
"""
