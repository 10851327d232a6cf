"""Run plumbing: the ``lintf`` command and what a run needs beside the model core.

The model core (``registry``, ``feature_maps``, ``attention``, ``ops``, ``models``, ``heads``,
``tasks``, ``data``) computes; this package runs it from the command line. Run directories and the
checkpoint layout version, which the tasks use too, live beneath both in ``lintf.layout``.

    cli.py                 ``lintf``: LintfCLI (LightningCLI: fit, validate, test, predict) and ``main``
    commands.py            the other subcommands (``lintf build``, ``lintf checkpoint upgrade``, extensions'),
                           functions whose signature and docstring are their options and --help
    extensions.py          the ``lintf.extensions`` entry points (example tasks add commands, upgrades)
    parsers.py             the subcommands' parsers, and their mistakes in one paragraph
    errors.py              the errors a run reports in one paragraph, and its exit statuses
    config_files.py        ``--config`` YAML read before the parser exists; whole-number batch limits
    plugin_flags.py        the ``--plugins`` to load, and configs naming plugins the command line does not load
    config_checks.py       which class paths a config or checkpoint may have lintf build
    preflight.py           checks before a subcommand starts (schedule length, resumed settings, weights)
    checkpoint_files.py    the one checkpoint loader; atomic writes, sha256 sidecars, stale temporaries
    checkpoint_damage.py   what a file torch cannot load is: not a checkpoint, or one cut short (and by how much)
    checkpoint_search.py   ``--ckpt_path FILE|last|best``: the checkpoint of this experiment, vetted
    checkpoint_format.py   what each checkpoint layout version holds, and ``lintf checkpoint upgrade``
    logger_placement.py    where the loggers write: under the run root, or into the run of ``--ckpt_path``
    run_config.py          a checkpoint's run supplies its config.yaml (test/predict) and names its plugins
    schedule_steps.py      a step schedule sized to the run: follows max_steps, a new cycle to train on
    run_metrics.py         what a run logged (TensorBoard events, metrics.csv) and its config.yaml's settings
    compare.py             ``lintf compare``: runs' curves in one PNG, a table of their final metrics
    loggers.py             TensorBoard and CSV with reserved versions, W&B that never blocks, quiet console
    callbacks/             last/best checkpoints, saved configs, predictions, samples, divergence stop, the
                           progress bar (the run's name, its steps) and the closing summary (metrics, a text sample)

Nothing is imported here: ``lintf.run.checkpoint_format`` can be imported without the CLI.
"""
