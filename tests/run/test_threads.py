"""The run's thread count: free CPUs, at most one per core, never raised, and the user's choice kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from lintf.run import threads
from lintf.run.errors import ConfigError
from lintf.run.threads import CpuFacts, busy_cpus, computes, cpu_quota, cpu_ticks, default_threads, physical_cores

USER_VARIABLES = ("LINTF_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(autouse=True)
def _thread_count_restored(monkeypatch):
    for name in USER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("usable, cores, busy, expected", [
    (2, 2, 0.0, 2),    # idle: one per core
    (2, 2, 0.2, 2),    # a daemon's crumbs leave both CPUs free
    (2, 2, 0.4, 1),    # most of a CPU is not free
    (2, 2, 1.0, 1),    # one core kept busy: the observed 6x slowdown with 2 threads
    (2, 2, 2.0, 1),    # everything busy: still one thread
    (4, 2, 0.0, 2),    # two hyper-threads per core: one thread per core
    (2, 1, 0.0, 1),
    (16, 16, 3.3, 12),    # 12.7 CPUs free: the 13th is not free enough
])
def test_default_threads(usable, cores, busy, expected):
    assert default_threads(CpuFacts(usable, cores, busy)) == expected


def test_cpu_ticks_count_listed_cpus_with_steal_busy_and_iowait_idle(tmp_path):
    stat = tmp_path / "stat"
    #                 user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  99 99 99 99 99 99 99 99 0 0\n"
                    "cpu0 10 1 2 100 7 3 4 5 0 0\n"
                    "cpu1 20 0 0 50 0 0 0 0 0 0\n"
                    "cpu2 1000 0 0 0 0 0 0 0 0 0\n"
                    "intr 12345\nprocs_running 3\n")
    assert cpu_ticks([0, 1], stat) == ((10 + 1 + 2 + 3 + 4 + 5) + 20, 132 + 70)


def test_busy_cpus_leave_out_this_process(monkeypatch):
    ticks = iter([(1000, 4000), (1300, 4200)])  # 300 busy ticks of 200 per CPU-pair: 100 are our own
    own = iter([50, 150])
    monkeypatch.setattr(threads, "cpu_ticks", lambda cpus: next(ticks))
    monkeypatch.setattr(threads, "own_ticks", lambda: next(own))
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    assert busy_cpus([0, 1]) == pytest.approx(2.0)  # (300 - 100) / 200 * 2 CPUs


def test_busy_cpus_see_a_spinning_process():
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code = f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    spinner = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        assert busy_cpus([cpu], seconds=0.3) > 0.7
    finally:
        spinner.kill()
        spinner.wait()


def test_physical_cores_from_sysfs_topology(tmp_path):
    for cpu, core in enumerate([0, 1, 0, 1]):  # cpu2 and cpu3 are hyper-threads of cores 0 and 1
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert physical_cores([0, 1, 2, 3], tmp_path) == 2
    assert physical_cores([0, 2], tmp_path) == 1
    assert physical_cores([0, 7], tmp_path) == 2  # unreadable: every CPU counts


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "200000 100000\n"}, 2.0),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.5),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_cpu_quota(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpu_quota(tmp_path) == expected


def facts(monkeypatch, usable: int, cores: int, busy: float) -> None:
    monkeypatch.setattr(threads, "cpu_facts", lambda: CpuFacts(usable, cores, busy))


def test_a_busy_core_lowers_the_count_and_says_why(monkeypatch, capsys):
    torch.set_num_threads(2)
    facts(monkeypatch, 2, 2, 1.0)
    assert threads.use_default_threads(["fit"]) == 1 and torch.get_num_threads() == 1
    assert capsys.readouterr().err == ""  # said where the run starts its work, not before --help or an error
    threads.say_thread_notice()
    assert "lintf: computing on 1 thread: other processes keep 1.0 of the 2 CPUs busy" in capsys.readouterr().err


def test_an_idle_machine_keeps_one_thread_per_core_silently(monkeypatch, capsys):
    torch.set_num_threads(2)
    facts(monkeypatch, 2, 2, 0.0)
    assert threads.use_default_threads(["fit"]) == 2 and torch.get_num_threads() == 2
    assert capsys.readouterr().err == ""


def test_the_count_is_never_raised(monkeypatch):
    torch.set_num_threads(1)
    facts(monkeypatch, 4, 4, 0.0)
    assert threads.use_default_threads(["fit"]) == 1 and torch.get_num_threads() == 1


@pytest.mark.parametrize("variable", ["OMP_NUM_THREADS", "MKL_NUM_THREADS"])
def test_pytorch_variables_keep_pytorch_count(monkeypatch, variable):
    torch.set_num_threads(2)
    monkeypatch.setenv(variable, "2")
    facts(monkeypatch, 2, 2, 1.0)
    assert threads.use_default_threads(["fit"]) == 2 and torch.get_num_threads() == 2


def test_lintf_threads_sets_the_count(monkeypatch):
    torch.set_num_threads(1)
    monkeypatch.setenv("LINTF_THREADS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    facts(monkeypatch, 2, 2, 1.0)
    assert threads.use_default_threads(["fit"]) == 2 and torch.get_num_threads() == 2


@pytest.mark.parametrize("argv, expected", [
    (["fit", "--config", "configs/copy.yaml"], True),
    (["validate", "-c", "c.yaml"], True),
    (["test", "-c", "c.yaml"], True),
    (["predict", "-c", "c.yaml"], True),
    (["generate", "--ckpt-path", "last"], True),
    (["asr", "vtln"], True),    # an extension's command may train
    (["-c", "c.yaml"], True),    # the subcommand may come from the config file
    ([], False),
    (["--help"], False),
    (["fit", "--help"], False),
    (["fit", "-c", "c.yaml", "-h"], False),
    (["fit", "-c", "c.yaml", "--print_config"], False),
    (["fit", "-c", "c.yaml", "--print_config=skip_null"], False),
    (["generate", "--help"], False),
    (["build"], False),
    (["checkpoint", "upgrade", "old.ckpt"], False),
])
def test_computes(argv, expected):
    assert computes(argv) is expected


@pytest.mark.parametrize("argv", [[], ["--help"], ["fit", "--help"], ["build"], ["checkpoint", "upgrade", "a.ckpt"]])
def test_a_command_line_that_runs_no_model_samples_nothing(monkeypatch, argv):
    def sample() -> CpuFacts:
        raise AssertionError("sampled the CPUs for a command that runs no model")

    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "cpu_facts", sample)
    assert threads.use_default_threads(argv) == 2 and torch.get_num_threads() == 2


@pytest.mark.parametrize("argv", [["fit"], ["--help"], ["build"]])
@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5"])
def test_a_bad_lintf_threads_is_refused(monkeypatch, value, argv):
    monkeypatch.setenv("LINTF_THREADS", value)
    with pytest.raises(ConfigError, match=f"LINTF_THREADS={value!r} is not valid: give a whole number"):
        threads.use_default_threads(argv)


def test_the_lintf_command_refuses_a_bad_lintf_threads(tmp_path):
    env = {**os.environ, "LINTF_THREADS": "many"}
    # a subcommand's help (the subcommand list alone is printed without loading lintf, so it reads no setting)
    done = subprocess.run(["lintf", "fit", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("lintf: error: LINTF_THREADS='many' is not valid")
