"""Plugins: entry points (loaded at the first registry lookup, for Python users too), the off switch, local modules
saved with the run, failures named."""

import re
import shlex
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint

import pytest
import yaml

import lintf
import lintf.plugins as plugins
import lintf.run.plugin_flags as plugin_flags
from lintf.run.cli import main
from lintf.registry import ATTENTIONS, FEATURE_MAPS
from tests.cli.helpers import REPO, run, tiny

EXAMPLE = REPO / "plugins" / "lintf-softplus"
EXAMPLE_ENTRY_POINT = EntryPoint("softplus_beta", "lintf_softplus", plugins.ENTRY_POINT_GROUP)

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
    before = set(ATTENTIONS._classes), set(FEATURE_MAPS._classes), set(sys.modules)
    yield
    for registry, names in ((ATTENTIONS, before[0]), (FEATURE_MAPS, before[1])):
        for name in set(registry._classes) - names:
            del registry._classes[name]
    for module in set(sys.modules) - before[2]:
        if module.startswith(("lintf_softplus", "local_plugin", "broken_plugin", "looking_plugin")):
            del sys.modules[module]


def fake_entry_points(monkeypatch, *points: EntryPoint) -> None:
    """Installed plugins are ``points``, not yet loaded in this process."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [p for p in points if p.group == group])
    monkeypatch.setattr(plugins, "_loaded", None)
    monkeypatch.delitem(sys.modules, "lintf_softplus", raising=False)  # the installed copy, imported by conftest
    monkeypatch.delitem(FEATURE_MAPS._classes, "softplus_beta", raising=False)


def test_entry_point_registers_the_example_plugin(monkeypatch, clean_registry):
    fake_entry_points(monkeypatch, EXAMPLE_ENTRY_POINT)
    assert plugins.load_entry_point_plugins() == ["softplus_beta"]
    assert "softplus_beta" in FEATURE_MAPS._classes


@pytest.mark.parametrize("lookup", [
    lambda: "softplus_beta" in lintf.list_feature_maps(),
    lambda: "softplus_beta" in FEATURE_MAPS,
    lambda: FEATURE_MAPS.get("softplus_beta").registry_name == "softplus_beta",
    lambda: lintf.build_feature_map("softplus_beta", 4, beta=2.0).beta == 2.0,
])
def test_the_first_registry_lookup_loads_installed_plugins_once(monkeypatch, clean_registry, lookup):
    fake_entry_points(monkeypatch, EXAMPLE_ENTRY_POINT)
    imported = []
    real_import = EntryPoint.load
    monkeypatch.setattr(EntryPoint, "load", lambda self: imported.append(self.name) or real_import(self))
    assert "softplus_beta" not in FEATURE_MAPS._classes
    assert lookup()  # no plugin call: a Python user's first lookup sees the installed names
    lintf.list_attentions(), lintf.list_feature_maps()
    assert imported == ["softplus_beta"]


def test_a_plugin_that_looks_names_up_while_it_loads_is_loaded_once(monkeypatch, clean_registry, tmp_path):
    (tmp_path / "looking_plugin.py").write_text(textwrap.dedent('''
        import lintf
        from lintf.feature_maps.elu import EluFeatureMap
        KNOWN = lintf.list_feature_maps()  # a lookup while the plugins load
        lintf.register_feature_map("looking_elu")(type("LookingElu", (EluFeatureMap,), {}))
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points(monkeypatch, EntryPoint("looking", "looking_plugin", plugins.ENTRY_POINT_GROUP))
    assert "looking_elu" in lintf.list_feature_maps()
    assert "looking_elu" not in sys.modules["looking_plugin"].KNOWN


def test_a_broken_plugin_is_named_at_every_lookup(monkeypatch, clean_registry):
    fake_entry_points(monkeypatch, EntryPoint("broken", "broken_plugin_missing", plugins.ENTRY_POINT_GROUP))
    for _ in range(2):  # not once and then silently absent
        with pytest.raises(plugins.PluginError) as error:
            lintf.list_attentions()
        assert "lintf plugin 'broken' (broken_plugin_missing" in str(error.value)
        assert "ModuleNotFoundError" in str(error.value) and f"{plugins.DISABLE_ENV}=1" in str(error.value)


def test_an_installed_plugin_is_there_for_python_in_a_fresh_interpreter(tmp_path):
    """The real entry-point machinery: a distribution's metadata on sys.path, nothing imported by hand."""
    (tmp_path / "fresh_plugin.py").write_text(textwrap.dedent('''
        from lintf import register_attention
        from lintf.attention import SoftmaxAttention

        @register_attention("fresh_softmax")
        class FreshSoftmax(SoftmaxAttention):
            """Softmax attention under another name."""
    '''))
    info = tmp_path / "fresh_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fresh-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lintf.plugins]\nfresh = fresh_plugin\n")
    script = "import lintf; print(lintf.build_attention('fresh_softmax', head_dim=8).registry_name)"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "fresh_softmax", done.stderr


def test_the_example_plugin_does_not_take_the_readme_example_s_name(monkeypatch, clean_registry):
    readme = (REPO / "README.md").read_text()
    readme_names = set(re.findall(r'@register_feature_map\("([^"]+)"\)', readme))
    fake_entry_points(monkeypatch, EXAMPLE_ENTRY_POINT)
    before = set(FEATURE_MAPS._classes)
    plugins.load_entry_point_plugins()
    assert readme_names and not (set(FEATURE_MAPS._classes) - before) & readme_names


def test_the_example_plugin_docstring_command_works(monkeypatch, clean_registry, tmp_path):
    fake_entry_points(monkeypatch, EXAMPLE_ENTRY_POINT)
    import lintf_softplus

    command = re.search(r"^ *(lintf fit .*)$", lintf_softplus.__doc__.replace("\\\n", ""), re.MULTILINE)
    args = shlex.split(command.group(1))[2:]
    assert "--model.encoder.feature_map" in args, args
    args = [REPO / arg if arg.startswith("configs/") else arg for arg in args]
    cli = run(tiny(tmp_path, *map(str, args), "--trainer.fast_dev_run", "1"))
    feature_map = cli.model.encoder.layers[0].attention.attention.feature_map
    assert type(feature_map).__name__ == "SoftplusBetaFeatureMap" and feature_map.beta == 2.0


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
    saved = tmp_path / "lightning_logs" / "copy-local_test_softmax" / "version_0" / "config.yaml"
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
    assert plugin_flags.plugins_in_args(args) == ["a", "b", "c"]
    with pytest.raises(plugins.PluginError) as error:
        plugin_flags.check_config_plugins(args)
    assert "names plugins from_config, which are not loaded" in str(error.value)
    assert "add --plugins from_config" in str(error.value)
    plugin_flags.check_config_plugins([*args, "--plugins", "from_config"])


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
