"""The table of the model's modules and parameters printed when a fit starts, without a FLOPs column.

Lightning's summary has a FLOPs column that it fills only for a model with an
``example_input_array``; lintf's tasks have none, so it read 0 for every module.
"""

from __future__ import annotations

import logging
from typing import Any

from lightning.pytorch.callbacks import ModelSummary
from lightning.pytorch.utilities.model_summary.model_summary import _format_summary_table

# Lightning's own summary logs here: whatever logging setup shows or hides it applies to this one too.
log = logging.getLogger("lightning.pytorch.callbacks.model_summary")


class ParameterSummary(ModelSummary):
    """Lightning's model summary (each module's name, type, parameters and mode; the totals) without FLOPs.

    Args:
        max_depth: depth of nested modules listed (0 prints nothing).
    """

    # Overrides ModelSummary.summarize (a public static hook) and calls Lightning's table formatter
    # (private, the one ModelSummary itself uses). Checked by tests/callbacks/test_parameter_summary.py.
    @staticmethod
    def summarize(summary_data: list[tuple[str, list[str]]], total_parameters: int, trainable_parameters: int,
                  model_size: float, total_training_modes: dict[str, int], total_flops: int,
                  **summarize_kwargs: Any) -> None:
        columns = [column for column in summary_data if column[0] != "FLOPs"]
        table = _format_summary_table(total_parameters, trainable_parameters, model_size, total_training_modes,
                                      total_flops, *columns)
        lines = [line for line in table.splitlines() if not line.endswith("Total Flops")]
        log.info("\n" + "\n".join(lines))


def with_parameter_summary(trainer_options: dict[str, Any], callbacks: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """The Trainer's options and callbacks with ParameterSummary in place of Lightning's default summary.

    Nothing changes where the summary is off (``enable_model_summary: false``, ``barebones``) or a
    callback list already holds a ModelSummary of its own.

    Args:
        trainer_options: keyword arguments of the Trainer.
        callbacks: callbacks for the Trainer besides those in ``trainer_options``.
    """
    given = [*callbacks, *(trainer_options.get("callbacks") or [])]
    if (trainer_options.get("enable_model_summary") is False or trainer_options.get("barebones")
            or any(isinstance(callback, ModelSummary) for callback in given)):
        return trainer_options, callbacks
    return {**trainer_options, "enable_model_summary": False}, [*callbacks, ParameterSummary()]
