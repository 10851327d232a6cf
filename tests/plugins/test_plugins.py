"""Plugins: entry points, the off switch, local modules saved with the run, failures named."""

import sys
from importlib.metadata import EntryPoint

import pytest
import yaml

import lintf
import lintf.plugins as plugins
from lintf.run.cli import main
from lintf.registry import ATTENTIONS, FEATURE_MAPS
from tests.cli.helpers import REPO, run, tiny

EXAMPLE = REPO / "plugins" / "lintf-softplus"

LOCAL_PLUGIN = '''
from lintf import register_attention
from lintf.attention import SoftmaxAttention


@register_attention("local_test_softmax")
class LocalSoftmax(SoftmaxAttention):
    """Softmax attention under another name, registered by a local plugin file."""
'''


@pytest.fixture
def clean_registry():
    """Forget what a test's plugins registered, so each test imports them afresh."""
    before = set(ATTENTIONS.names()), set(FEATURE_MAPS.names()), set(sys.modules)
    yield
    for registry, names in ((ATTENTIONS, before[0]), (FEATURE_MAPS, before[1])):
        for name in set(registry.names()) - names:
            registry.unregister(name)
    for module in set(sys.modules) - before[2]:
        if module.startswith(("lintf_softplus", "local_plugin", "broken_plugin")):
            del sys.modules[module]


def fake_entry_points(monkeypatch, *points: EntryPoint) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [p for p in points if p.group == group])


def test_entry_point_registers_the_example_plugin(monkeypatch, clean_registry):
    fake_entry_points(monkeypatch, EntryPoint("softplus", "lintf_softplus", plugins.ENTRY_POINT_GROUP))
    assert plugins.load_entry_point_plugins() == ["softplus"]
    assert "softplus" in lintf.list_feature_maps()


def test_example_plugin_usable_from_the_cli(monkeypatch, clean_registry, tmp_path):
    fake_entry_points(monkeypatch, EntryPoint("softplus", "lintf_softplus", plugins.ENTRY_POINT_GROUP))
    cli = run(tiny(tmp_path, "--model.encoder.feature_map", "softplus", "--trainer.fast_dev_run", "1"))
    assert type(cli.model.encoder.layers[0].attention.attention.feature_map).__name__ == "SoftplusFeatureMap"


def test_off_switch(monkeypatch, clean_registry, tmp_path):
    fake_entry_points(monkeypatch, EntryPoint("broken", "broken_plugin_missing", plugins.ENTRY_POINT_GROUP))
    monkeypatch.setenv(plugins.DISABLE_ENV, "1")
    assert plugins.load_entry_point_plugins() == []  # the broken plugin is not even imported
    assert run(tiny(tmp_path, "--trainer.fast_dev_run", "1")).trainer.state.finished


def test_broken_entry_point_names_itself(monkeypatch, clean_registry, tmp_path, capsys):
    fake_entry_points(monkeypatch, EntryPoint("broken", "broken_plugin_missing", plugins.ENTRY_POINT_GROUP))
    with pytest.raises(SystemExit):
        main(tiny(tmp_path))
    err = capsys.readouterr().err
    assert "lintf plugin 'broken' (broken_plugin_missing" in err and "LINTF_NO_PLUGINS=1" in err
    assert "Traceback" not in err


def test_local_plugin_is_saved_with_the_run(clean_registry, tmp_path, monkeypatch):
    monkeypatch.setattr(plugins, "entry_points", lambda group: [])
    path = tmp_path / "local_plugin.py"
    path.write_text(LOCAL_PLUGIN)
    run(tiny(tmp_path, "--plugins", str(path), "--model.encoder.attention", "local_test_softmax", "--trainer.max_steps", "1",
             "--trainer.limit_val_batches", "0"))
    saved = tmp_path / "lightning_logs" / "version_0" / "config.yaml"
    config = yaml.safe_load(saved.read_text())
    assert config["plugins"] in ([str(path)], str(path)) and config["model"]["init_args"]["encoder"]["attention"] == "local_test_softmax"
    ATTENTIONS.unregister("local_test_softmax")
    del sys.modules["local_plugin"]
    with pytest.raises(plugins.PluginError, match=f"add --plugins {path}"):
        run(["fit", "--config", str(saved)])  # a config file is data: it never imports the plugin itself
    assert "local_test_softmax" not in lintf.list_attentions() and "local_plugin" not in sys.modules
    run(["fit", "--config", str(saved), "--plugins", str(path)])  # the saved run, with the plugin it names
    assert "local_test_softmax" in lintf.list_attentions()


def test_broken_local_plugin(tmp_path, capsys, clean_registry):
    path = tmp_path / "broken_plugin.py"
    path.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(SystemExit):
        main(tiny(tmp_path, "--plugins", str(path)))
    err = capsys.readouterr().err
    assert f"lintf plugin '{path}'" in err and "RuntimeError: boom" in err


def test_plugins_come_from_flags_and_configs_only_name_them(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"plugins": ["from_config", "a"]}))
    args = ["fit", "--config", str(config), "--plugins", "a", "--plugins=[b, c]"]
    assert plugins.plugins_in_args(args) == ["a", "b", "c"]
    with pytest.raises(plugins.PluginError) as error:
        plugins.check_config_plugins(args)
    assert "names plugins from_config, which are not loaded" in str(error.value)
    assert "add --plugins from_config" in str(error.value)
    plugins.check_config_plugins([*args, "--plugins", "from_config"])


def test_config_file_plugin_runs_no_code(tmp_path, capsys, clean_registry):
    marker = tmp_path / "ran"
    path = tmp_path / "payload.py"
    path.write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = tmp_path / "evil.yaml"
    config.write_text(yaml.safe_dump({"plugins": [str(path)]}))
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(tmp_path, "--config", str(config)))
    assert exit_info.value.code == 2 and f"add --plugins {path}" in capsys.readouterr().err
    assert not marker.exists()


def test_example_plugin_has_its_own_package():
    assert (EXAMPLE / "pyproject.toml").is_file() and (EXAMPLE / "tests").is_dir()
    assert 'lintf.plugins' in (EXAMPLE / "pyproject.toml").read_text()
