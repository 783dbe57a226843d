"""The configuration, one concept in one place: the YAML file is read (``yamlfile``), typed and
cross-checked section by section (``spec``, with the per-model options of ``model_options`` and the
training section's fit to its diagnosis in ``training_fit``), its errors put in one line
(``errors``), resolved for this machine's training run (``training``) and frozen into the settings
the engine and the trainer run with (``settings``)."""
