"""The ``lintf`` command: LightningCLI over every task and data module, in subclass mode, and the other subcommands.

``lintf fit --config configs/copy.yaml`` trains; ``validate``, ``test`` and ``predict`` take the
same configs. Plugins are imported before the parser is built, so their attentions and feature
maps are valid names. Mistakes in the configuration end in one paragraph, not a traceback
(set LINTF_DEBUG=1 to see it anyway). ``main`` runs the other subcommands (``lintf build``,
``lintf checkpoint upgrade`` and those of installed extensions, ``lintf.run.commands``) itself;
``lintf --help`` lists them all.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from lightning.pytorch import LightningDataModule
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException

from lintf.layout.directories import discard_unused_run_directory, reserve_run_directory
from lintf.layout.run_names import config_run_name
from lintf.names import import_class
from lintf.ops import check_environment
from lintf.ops.extension import load_library
from lintf.plugins import PluginError, load_plugins
from lintf.registry import list_attentions, list_feature_maps
from lintf.run.callbacks import LogSamples, PredictionWriter, RunCheckpoint, SaveRunConfig
from lintf.run.callbacks.final_validation import ValidateAtTheEnd, final_validation_notice
from lintf.run.callbacks.finite_training import NonFiniteError, StopOnNonFinite
from lintf.run.callbacks.fit_summary import FitSummary
from lintf.run.callbacks.interrupt import SaveOnInterrupt
from lintf.run.callbacks.parameter_summary import with_parameter_summary
from lintf.run.callbacks.progress_bar import with_progress_bar
from lintf.run.checkpoint_files import CheckpointWriteError, VerifiedCheckpointIO, remove_stale_temporaries
from lintf.run.checkpoint_search import (LINKED_FROM_DATA, CheckpointError, find_checkpoint, hyperparameter_keys,
                                         model_settings, search_roots, setting_differences)
from lintf.run.commands import TRAINER_SUBCOMMANDS, Command, all_commands, find_command, run_command
from lintf.run.config_checks import ClassPathError, check_checkpoint_hyperparameters, check_class_paths
from lintf.run.config_files import ConfigFileError, integer_batch_limits
from lintf.run.errors import RUN_ERRORS, USER_ERRORS, WRITE_ERRNOS, ConfigError, RunFailed
from lintf.run.extensions import ExtensionError
from lintf.run.logger_placement import continue_in, default_logger, place_under_root, run_to_continue
from lintf.run.loggers import quiet_lightning_notices
from lintf.run.parsers import LintfArgumentParser, summarize
from lintf.run.plugin_flags import check_config_plugins, plugins_in_args
from lintf.run.preflight import CheckScheduleLength, check_before_fit, check_checkpoint_fits, listed
from lintf.run.run_config import with_run_config
from lintf.run.run_reports import say_checkpoints, say_run_directory, stopped_report
from lintf.run.schedule_steps import StartNewCycle, is_extension, scheduler_arguments, size_schedule
from lintf.run.threads import use_default_threads
from lintf.tasks.decoding import Decoding


def registry_epilog() -> str:
    """--help footer listing the names valid for --model.encoder.attention and --model.encoder.feature_map."""
    return (
        f"registered attentions: {', '.join(list_attentions())}; "
        f"feature maps: {', '.join(list_feature_maps())}"
    )


def options_hint(subcommand: str) -> str:
    """The first lines of ``lintf <subcommand> --help``: where the model's and data's options are listed."""
    from lightning.pytorch import LightningModule

    import lintf.data
    import lintf.tasks

    classes = [getattr(lintf.tasks, name) for name in lintf.tasks.__all__]
    tasks = [cls.__name__ for cls in classes if isinstance(cls, type) and issubclass(cls, LightningModule)
             and cls.__name__ not in ("TransformerTask", "AutoregressiveTask")]
    return (f"{TRAINER_SUBCOMMANDS[subcommand]}\n\nThe model's and the data's options (below: the trainer's): "
            f"`lintf {subcommand} --model.help CopyTask`, `lintf {subcommand} --data.help CopyData`. Tasks: "
            f"{', '.join(tasks)}; data: {', '.join(lintf.data.__all__)}. Most runs start from a config: "
            f"lintf {subcommand} --config configs/copy.yaml")


DESCRIPTION = ("lintf: linear transformers (Katharopoulos et al. 2020) on PyTorch Lightning.\n"
               "`lintf <subcommand> --help` describes each subcommand.")


class LintfCLI(LightningCLI):
    """LightningCLI with lintf's tasks, links, callbacks, plugins and checkpoint checks.

    Args:
        args: command line (without the program name); None reads ``sys.argv``.
        run: run the subcommand (False only parses and instantiates).
        commands: the other subcommands, which ``main`` runs: listed by ``lintf --help`` (default: lintf's own).
    """

    def __init__(self, args: list[str] | None = None, run: bool = True, commands: tuple[Command, ...] | None = None) -> None:
        argv = sys.argv[1:] if args is None else args
        self.other_commands = all_commands(extensions=False) if commands is None else commands
        try:
            check_environment()  # the ops' LINTF_* settings, read late by the ops themselves
        except ValueError as error:
            raise ConfigError(str(error)) from None
        load_plugins(plugins_in_args(argv))
        check_config_plugins(argv)
        import lintf.data  # noqa: F401  (data modules become valid --data names)
        from lintf.tasks import TransformerTask

        epilog = {"epilog": registry_epilog()}
        main_parser = {"prog": "lintf", "description": DESCRIPTION}
        try:
            super().__init__(
                model_class=TransformerTask,
                datamodule_class=LightningDataModule,
                subclass_mode_model=True,
                subclass_mode_data=True,
                save_config_callback=SaveRunConfig,
                auto_configure_optimizers=False,
                seed_everything_default=0,
                parser_class=LintfArgumentParser,
                parser_kwargs={"allow_abbrev": False, **main_parser,
                               **{name: {**epilog, "allow_abbrev": False, "description": options_hint(name)}
                                  for name in self.subcommands()}},
                args=args,
                run=run,
            )
        except ConfigError:
            self._discard_run_directory()
            raise
        except SIGTERMException:
            stopped_by = next((callback.signal_received for callback in self.trainer.callbacks
                               if isinstance(callback, SaveOnInterrupt) and callback.signal_received), signal.SIGTERM)
            raise RunFailed(stopped_report(self.trainer, signal.Signals(stopped_by).name),
                            exit_code=128 + stopped_by) from None
        except (NonFiniteError, CheckpointWriteError, OSError) as error:
            if isinstance(error, OSError) and error.errno not in WRITE_ERRNOS or os.environ.get("LINTF_DEBUG"):
                raise
            self._discard_run_directory()
            raise RunFailed(str(error) if not isinstance(error, OSError) else
                            f"cannot write {error.filename}: {error.strerror}. Free space or choose a writable "
                            "--trainer.default_root_dir.") from error
        except RUN_ERRORS as error:  # met while the subcommand ran: one paragraph, no empty run directory
            self._discard_run_directory()
            if os.environ.get("LINTF_DEBUG"):
                raise
            raise ConfigError(summarize(str(error).strip() or type(error).__name__)) from error

    def _discard_run_directory(self) -> None:
        """Remove the run directory this process reserved, unless the run trained or wrote a checkpoint."""
        trainer = getattr(self, "trainer", None)
        if trainer is not None and trainer.global_step > 0:
            return  # a run that trained keeps its logs, even without a checkpoint
        reserved = [getattr(logger, "reserved_directory", None) for logger in getattr(trainer, "loggers", None) or []]
        for directory in [*reserved, getattr(self, "reserved_run_directory", None)]:
            discard_unused_run_directory(directory)

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, Any]) -> None:
        """LightningCLI's parser, whose subcommands ``lintf --help`` lists one line each, with the other commands."""
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        action = getattr(self.parser, "subcommands_action", None)
        if not add_subcommands or action is None:
            return
        # argparse lists subcommands through _choices_actions (private, unchanged since Python 3.2); Lightning
        # sets their help to the first paragraph of Trainer.fit's docstring and the like.
        for choice in action._choices_actions:
            choice.help = TRAINER_SUBCOMMANDS.get(choice.dest, choice.help)
        for command in self.other_commands:  # run by main before this parser; here for --help and its errors
            action.add_subcommand(command.name, self.parser_class(description=command.summary), help=command.summary)
        # One usage line (``lintf [-c CONFIG] SUBCOMMAND ...``, not every name again), no "(required)" line.
        action.metavar, action.help = "SUBCOMMAND", ""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--plugins", type=list[str] | str, default=[],
            help="Modules or .py files imported before parsing (they register attentions / feature maps); "
            "saved with the run config.",
        )
        # The data module owns the vocabulary and sequence length; the task cannot disagree.
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.init_args.{name}", apply_on="instantiate")
        parser.add_lightning_class_args(RunCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": "val/loss", "checkpoint.mode": "min", "checkpoint.save_top_k": 1,
            "checkpoint.filename": "best", "checkpoint.save_last": True, "checkpoint.enable_version_counter": False,
        })
        parser.add_lightning_class_args(PredictionWriter, "predictions")
        parser.add_lightning_class_args(LogSamples, "samples")
        # Outside ``model``: with --ckpt_path the model's options come from the checkpoint, these from here.
        parser.add_subclass_arguments(Decoding, "decoding", required=False, instantiate=True, fail_untyped=True,
                                      help="Decoding options of tasks that decode at test/predict time: a subclass "
                                      "of lintf.tasks.decoding.Decoding, the task's decoding_class.")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        super().parse_arguments(parser, args)
        subcommand = self.config.get("subcommand")
        if subcommand not in (None, *self.subcommands()):
            raise ConfigError(f"`lintf {subcommand}` takes no options before its name: run lintf {subcommand} ...")
        raw = sys.argv[1:] if args is None else args
        self.batch_limits = integer_batch_limits(raw) if isinstance(raw, list | tuple) else {}
        config = self.config[subcommand] if subcommand else self.config
        for key, limit in self.batch_limits.items():
            config.trainer[key] = limit  # so the saved config.yaml says 1 (one batch), not 1.0 (all of them)
        self.checkpoint: dict[str, Any] | None = None
        self.continued_run: str | None = None
        self.new_cycle = False
        self.schedule_notice: str | None = None
        self.run_name = config_run_name(config)  # the new run directory's name: lightning_logs/<run name>/version_N
        place_under_root(config.trainer.get("logger"), config.trainer.get("default_root_dir"), self.run_name)
        if rank_zero_only.rank == 0:
            for path, size in remove_stale_temporaries(search_roots(config)):
                print(f"lintf: removed {path} ({size / 2**20:.1f} MB), left by a checkpoint save that was killed",
                      file=sys.stderr, flush=True)
        try:
            check_class_paths(config, "the configuration")
            if subcommand and config.get("ckpt_path"):
                config.ckpt_path, self.checkpoint = find_checkpoint(
                    config.ckpt_path, config.model.class_path, search_roots(config), model_settings(config))
        except (CheckpointError, ClassPathError) as error:
            raise ConfigError(str(error)) from None
        if subcommand == "fit":
            self._size_schedule(config, raw if isinstance(raw, list | tuple) else [])
        if self.checkpoint is not None:
            self.continued_run = run_to_continue(config.ckpt_path)
        if self.continued_run is not None:  # the checkpoint's run: its logs, checkpoints and predictions go on there
            continue_in(config.trainer.get("logger"), self.continued_run, self._resumed_step(subcommand))

    def _size_schedule(self, config: Any, argv: list[str]) -> None:
        """A step-count schedule sized to the run (``lintf.run.schedule_steps``), said on rank 0."""
        if scheduler_arguments(config) is None:
            return
        self.new_cycle = is_extension(self.checkpoint, int(config.trainer.get("max_steps") or -1), list(argv))
        self.schedule_notice = size_schedule(config, list(argv), self.checkpoint)

    # Overrides LightningCLI._parse_ckpt_path (private), which would torch.load the checkpoint again without
    # its digest and merge whatever its hyper_parameters hold into the config (even a class path to call).
    # Checked by tests/cli/test_upstream_contracts.py.
    def _parse_ckpt_path(self) -> None:
        """The model's settings from ``--ckpt_path``'s checkpoint, checked like the user's own, and what they replace."""
        if self.checkpoint is None:
            return
        subcommand = self.config.subcommand
        config = self.config[subcommand]
        hparams = dict(self.checkpoint.get("hyper_parameters") or {})
        try:
            check_checkpoint_hyperparameters(hparams, hyperparameter_keys(import_class(config.model.class_path)),
                                             config.ckpt_path)
        except ClassPathError as error:
            raise ConfigError(str(error)) from None
        hparams.pop("_instantiator", None)
        if not hparams:
            return
        replaced = setting_differences(hparams, model_settings(config))
        if replaced and subcommand == "fit":
            raise ConfigError(
                f"resuming from {config.ckpt_path}, whose model settings differ from this config: {listed(replaced)}. "
                "A resumed run continues the checkpoint's model; use the settings of the run that wrote it (its "
                "config.yaml), or start a new run without --ckpt_path."
            )
        if replaced:
            print(f"lintf: the model is built as checkpoint {config.ckpt_path} was trained; ignoring this config's "
                  f"{listed(replaced)}", file=sys.stderr, flush=True)
        merged = {"class_path": hparams.pop("_class_path", config.model.class_path), "dict_kwargs": hparams}
        self.config = self.parser.parse_object({subcommand: {"model": merged}}, self.config)

    # Overrides LightningCLI._instantiate_trainer (private): the one place where the trainer's config and the
    # callbacks built from the parser meet before Trainer(...). Checked by tests/cli/test_upstream_contracts.py.
    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        config = {**config, **getattr(self, "batch_limits", {})}
        plugins = config.get("plugins") or []
        plugins = list(plugins) if isinstance(plugins, list | tuple) else [plugins]
        if not any(isinstance(plugin, CheckpointIO) for plugin in plugins):
            config = {**config, "plugins": [*plugins, VerifiedCheckpointIO()]}  # atomic writes, sha256 sidecars
        # The built-in checkpoint callback yields to ``--trainer.enable_checkpointing false``.
        if config.get("enable_checkpointing") is False:
            callbacks = [callback for callback in callbacks if not isinstance(callback, ModelCheckpoint)]
        callbacks = [*callbacks, StopOnNonFinite(), CheckScheduleLength(), ValidateAtTheEnd(), SaveOnInterrupt(), FitSummary(),
                     *([StartNewCycle()] if getattr(self, "new_cycle", False) else [])]
        config, callbacks = with_parameter_summary(config, callbacks)  # Lightning's, without FLOPs
        callbacks = with_progress_bar(config, callbacks)  # the run's name, and steps for a run of max_steps
        root = config.get("default_root_dir") or os.getcwd()
        if config.get("logger") in (None, True) and not config.get("barebones"):
            # Lightning's default logger, except that concurrent runs get distinct version directories.
            logger = default_logger(root, self.continued_run, self._resumed_step(self.subcommand),
                                    getattr(self, "run_name", None))
            config = {**config, "logger": logger}
        elif config.get("logger") in (False, []) or config.get("barebones"):
            # Without a logger every run still gets a directory of its own (its config and checkpoints); other
            # ranks receive rank 0's (run_directory and ModelCheckpoint broadcast it).
            if self.continued_run is not None:
                config = {**config, "default_root_dir": self.continued_run}
            elif rank_zero_only.rank == 0:
                self.reserved_run_directory = reserve_run_directory(root, getattr(self, "run_name", None))
                config = {**config, "default_root_dir": self.reserved_run_directory}
        return super()._instantiate_trainer(config, callbacks)

    def _resumed_step(self, subcommand: str | None) -> int | None:
        """The global step ``fit`` resumes from (its checkpoint's); None for other subcommands or a fresh fit."""
        if subcommand != "fit" or self.checkpoint is None:
            return None
        return int(self.checkpoint.get("global_step", 0))

    def before_fit(self) -> None:
        load_library()  # a first build happens here, with its own progress line, not inside the progress bar
        config = self.config["fit"]
        check_before_fit(self.model, self.trainer.max_steps, self.checkpoint, config.get("ckpt_path"), self.new_cycle)
        notices = [self.schedule_notice, final_validation_notice(self.trainer)]  # once the run's checks passed
        for notice in filter(None, notices if self.trainer.is_global_zero else []):
            print(notice, flush=True)
        say_run_directory(self.trainer)

    def before_validate(self) -> None:
        self._check_checkpoint("validate")

    def before_test(self) -> None:
        self._check_checkpoint("test")

    def before_predict(self) -> None:
        self._check_checkpoint("predict")

    def _check_checkpoint(self, subcommand: str) -> None:
        """Before validate, test or predict: the checkpoint must fit the model; then say where the run's files go."""
        load_library()
        if self.checkpoint is not None:
            check_checkpoint_fits(self.model, self.checkpoint, self.config[subcommand].ckpt_path)
        say_run_directory(self.trainer)

    def after_validate(self) -> None:
        say_run_directory(self.trainer)

    after_test = after_predict = after_validate

    def after_fit(self) -> None:
        """Say where the run went: its directory and its checkpoints; then what it reached, and how fast."""
        say_run_directory(self.trainer)
        say_checkpoints(self.trainer)
        summaries = [callback.summary(self.trainer) for callback in self.trainer.callbacks
                     if isinstance(callback, FitSummary) and self.trainer.is_global_zero]
        if summaries and summaries[0]:
            print(summaries[0], flush=True)

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
            subcommand = self.config_init.get("subcommand")
            decoding = (self.config_init[subcommand] if subcommand else self.config_init).get("decoding")
            if decoding is not None:
                self.model.use_decoding(decoding)
        except USER_ERRORS as error:
            raise ConfigError(summarize(str(error))) from error


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``lintf`` console script: fit, validate, test, predict, or another subcommand."""
    argv = sys.argv[1:] if args is None else args
    quiet_lightning_notices()
    try:
        use_default_threads(argv)  # before any work: fewer threads where other processes keep CPUs busy
        command = find_command(argv[0]) if argv[:1] else None
        if command is not None:
            run_command(command, argv[1:])  # what it returns (a path it wrote) is no exit status
            return
        # ``lintf``, ``lintf --help`` or a mistyped subcommand: the parser lists every subcommand
        commands = None if argv[:1] and argv[0] in LintfCLI.subcommands() else all_commands()
        with_config = with_run_config(argv)
        LintfCLI(args if with_config == argv else with_config, commands=commands)
    except (ConfigError, ConfigFileError, PluginError, ExtensionError) as error:
        if os.environ.get("LINTF_DEBUG"):
            raise
        print(f"lintf: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    except RunFailed as error:
        print(f"lintf: {'error: ' if error.exit_code == 1 else ''}{error}", file=sys.stderr, flush=True)
        raise SystemExit(error.exit_code) from None


if __name__ == "__main__":
    main()
