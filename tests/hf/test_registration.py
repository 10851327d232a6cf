"""`import lintf` registers lintf's classes with transformers' Auto classes when transformers is imported,
before or after lintf, and does not import transformers itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("transformers")

CHECK = """
import sys
{first}
{second}
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING
config = AutoConfig.for_model("lintf", vocab_size=7, encoder={{"d_model": 8, "n_layers": 1, "n_heads": 2}})
model = AutoModelForCausalLM.from_config(config)
print(type(config).__name__, type(model).__name__, TOKENIZER_MAPPING[type(config)].__name__)
"""


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
@pytest.mark.parametrize("first, second", [("import lintf", "import transformers"),
                                           ("import transformers.models.auto", "import lintf")])
def test_auto_classes_know_lintf_whichever_is_imported_first(first, second):
    assert run_python(CHECK.format(first=first, second=second)) == "LintfConfig LintfForCausalLM LintfTokenizer"


@pytest.mark.slow
def test_import_lintf_does_not_import_transformers():
    assert run_python("import sys, lintf; print('transformers' in sys.modules)") == "False"
