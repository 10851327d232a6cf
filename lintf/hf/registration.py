"""Registering lintf's model, config and tokenizer with ``transformers``' Auto classes, without importing it.

``import lintf`` calls ``register_when_imported``: each Auto class's module of ``transformers``
(``configuration_auto``, ``modeling_auto``, ``tokenization_auto``) gets lintf's class the moment it
is imported, or at once if it is imported already, so ``import lintf`` stays as fast as without
``transformers`` and a program that never imports ``transformers`` never pays for it. Nothing is
downloaded and no code is read from a model directory: ``model_type: lintf`` names these classes.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

MINIMUM_TRANSFORMERS = (5, 24)
"""The first ``transformers`` whose models take and return ``cache`` (earlier ones: ``past_key_values``)."""


def transformers_version_ok() -> bool:
    """Whether the installed ``transformers`` is one lintf's classes follow; warns once if it is older."""
    import importlib.metadata  # here, not with lintf: only a program importing transformers pays for it

    version = importlib.metadata.version("transformers")
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if numbers >= MINIMUM_TRANSFORMERS:
        return True
    warnings.warn(f"lintf's models register with transformers >= {'.'.join(map(str, MINIMUM_TRANSFORMERS))}; "
                  f"transformers {version} is installed, so AutoModelForCausalLM does not know model_type lintf "
                  "(pip install -U transformers)", stacklevel=3)
    return False


def register_config() -> None:
    from transformers import AutoConfig

    from lintf.hf.configuration import LintfConfig
    from lintf.hf.settings import MODEL_TYPE

    AutoConfig.register(MODEL_TYPE, LintfConfig, exist_ok=True)


def register_model() -> None:
    from transformers import AutoModelForCausalLM

    from lintf.hf.configuration import LintfConfig
    from lintf.hf.modeling import LintfForCausalLM

    AutoModelForCausalLM.register(LintfConfig, LintfForCausalLM, exist_ok=True)


def register_tokenizer() -> None:
    from transformers import AutoTokenizer

    from lintf.hf.configuration import LintfConfig
    from lintf.hf.tokenization import LintfTokenizer

    AutoTokenizer.register(LintfConfig, tokenizer_class=LintfTokenizer, exist_ok=True)


REGISTRATIONS: dict[str, Callable[[], None]] = {
    "transformers.models.auto.configuration_auto": register_config,
    "transformers.models.auto.modeling_auto": register_model,
    "transformers.models.auto.tokenization_auto": register_tokenizer,
}
"""What to register once each module of ``transformers`` has run."""
_pending = dict(REGISTRATIONS)


def _register(module_name: str) -> None:
    """Run the registration waiting for ``module_name``; a failure warns rather than break ``transformers``."""
    registration = _pending.pop(module_name, None)
    if registration is None or not transformers_version_ok():
        return
    try:
        registration()
    except Exception as error:  # noqa: BLE001  (an incompatible transformers must not break its own import)
        warnings.warn(f"lintf could not register with transformers ({type(error).__name__}: {error})", stacklevel=2)


class AfterImport:
    """A meta path finder that finds nothing itself: it has the other finders find a watched module and
    registers after the module has run (a plain class: ``importlib.abc`` would cost ``import lintf`` time)."""

    def find_spec(self, name: str, path: Any, target: ModuleType | None = None) -> Any:
        if name not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            _register(name)
            if not _pending and self in sys.meta_path:
                sys.meta_path.remove(self)

        spec.loader.exec_module = exec_module  # this module's own loader object
        return spec


def register_when_imported() -> None:
    """Register lintf's classes with each Auto class now if ``transformers`` has it loaded, else when it loads."""
    for module_name in list(_pending):
        if module_name in sys.modules:
            _register(module_name)
    if _pending and not any(isinstance(finder, AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, AfterImport())
