"""The shared trainer: distillation methods on accelerate, using opsd_diag's signal code.

Entry points: ``opsd-train CONFIG [--out DIR] [--resume]`` (``python -m trainer``, or
``accelerate launch ... -m trainer`` for several processes) and, for the app, ``app.launch.start``
(the run is then a job of ``opsd_diag.jobs``: status, follow and stop live there).

Modules, one job each:

- ``setup``      ``opsd_diag.engine.setup.prepare`` plus what training adds (LoRA, EMA / frozen teacher, the
                 initial policy, evaluation sets), before the run directory is written
- ``roles``      the trainable student and its LoRA adapter
- ``rollouts``   which problems each step trains on, views, on-policy samples per generation chunk
                 (the rollouts' sampler of ``opsd_diag.engine.samplers``)
- ``evaluate``   held-out pass@1 / pass@k and the forgetting check, on the same sampler
- ``cross_step`` ``cross_losses``  one micro-batch against a teacher with another tokenizer, span by span
- ``sharded``    the trainer under FSDP2
- ``from_diagnosis``  the training config of one (config, signal) of a finished diagnosis, and its prediction
- ``levers``     the kept tokens and the teacher's revealed share, step by step (``training.token_mask``,
                 ``training.context_schedule``)
- ``checkpoint`` HF-format checkpoints with optimizer, scheduler and RNG state
- ``rundir``     the run directory: config.yaml, command.txt, metrics.jsonl, checkpoints
- ``loop``       the training loop on accelerate (logging, evaluation, saving, graceful stop)
- ``probes``     ``training.diagnose_every``: a probe (a small diagnosis) of the live policy every N steps
- ``trl_callback`` the same probes inside a TRL / ``transformers.Trainer`` run (``DiagnosisCallback``)
- ``cli``        ``opsd-train``

The per-token losses (``opsd_diag.core.losses``) and one micro-batch's step (``opsd_diag.engine.train_step``) live in
the library, where the diagnosis' lookahead steps through them too.
"""
