"""Copy-config training time with lintf's default threads and workers against each explicit setting.

    python -m benchmarks.cpu_defaults [--steps 400] [--threads 1 2] [--workers 0 1 2] [--repeats 1]

Runs ``lintf fit --config configs/copy.yaml --trainer.max_steps STEPS`` as a user does (logger and
checkpoints as the config has them, in a temporary directory), once with lintf's defaults (no
OMP_NUM_THREADS, MKL_NUM_THREADS or LINTF_THREADS; the data module's default workers) and once per
OMP_NUM_THREADS x ``--data.num_workers`` setting (and with OMP_WAIT_POLICY=passive, which PyTorch's
OpenMP reads when it loads, before lintf starts). Every setting runs under two conditions: an idle
machine, and one core kept busy by a child process spinning in a loop (started before the run, so
lintf sees it when it chooses its threads). A callback times the training steps, from the start of
the first to the end of the last; the table also gives the whole command's wall time (start-up, the
sanity check, the end of the run). Repeats take the median. Each condition reports default / best, the
step time of lintf's defaults over the fastest OMP_NUM_THREADS x workers combination's, which must stay
at or below 1.15. Writes benchmarks/results/cpu_defaults.{md,json} (or --out DIR).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from lightning.pytorch import Callback

from benchmarks.measure import module_environment, positive_int, write_report

RESULTS = Path(__file__).parent / "results"
COPY_YAML = Path(__file__).resolve().parents[1] / "configs" / "copy.yaml"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LINTF_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
LIMIT = 1.15  # default / best at most this


class StepTimer(Callback):
    """Writes the wall seconds of a run's training steps and its torch thread count to a JSON file.

    Args:
        path: the JSON file: {"seconds": first step's start to last step's end, "steps": n, "threads": n}.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.start: float | None = None
        self.end = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.start is None:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.end = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        import torch

        record = {"seconds": self.end - (self.start or self.end), "steps": trainer.global_step,
                  "threads": torch.get_num_threads()}
        Path(self.path).write_text(json.dumps(record))


class Setting(NamedTuple):
    """One way to run the command: its label, environment variables it sets and workers (None: the default)."""

    label: str
    env: dict[str, str]
    workers: int | None
    grid: bool = True  # one of the OMP_NUM_THREADS x workers combinations the defaults are compared with


def settings(threads: list[int], workers: list[int]) -> list[Setting]:
    """lintf's defaults first, then every OMP_NUM_THREADS x workers combination, then each thread count above
    one with OpenMP's passive wait policy (threads sleep instead of spinning while they wait; 0 workers)."""
    return [Setting("lintf defaults", {}, None, grid=False)] + [
        Setting(f"OMP_NUM_THREADS={t}, workers {w}", {"OMP_NUM_THREADS": str(t)}, w) for t in threads for w in workers
    ] + [Setting(f"OMP_NUM_THREADS={t}, OMP_WAIT_POLICY=passive, workers 0",
                 {"OMP_NUM_THREADS": str(t), "OMP_WAIT_POLICY": "passive"}, 0, grid=False) for t in threads if t > 1]


@contextlib.contextmanager
def busy_core(busy: bool) -> Iterator[None]:
    """Keep one core busy with a spinning child process for the block (nothing when ``busy`` is False)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)  # running, and seen as running, before lintf starts
        yield
    finally:
        spinner.kill()
        spinner.wait()


def lintf_executable() -> str:
    """The ``lintf`` console script of this Python environment."""
    beside = Path(sys.executable).with_name("lintf")
    found = str(beside) if beside.is_file() else shutil.which("lintf")
    if found is None:
        raise SystemExit("cpu_defaults: the lintf command is not installed (pip install -e .)")
    return found


def run_fit(setting: Setting, steps: int) -> dict[str, Any]:
    """Run the copy config's first ``steps`` steps under ``setting``; its step time, wall time and threads."""
    with tempfile.TemporaryDirectory(prefix="cpu_defaults-") as directory:
        record = Path(directory) / "steps.json"
        timer = json.dumps({"class_path": "benchmarks.cpu_defaults.StepTimer", "init_args": {"path": str(record)}})
        command = [lintf_executable(), "fit", "--config", str(COPY_YAML), "--trainer.max_steps", str(steps),
                   "--trainer.default_root_dir", directory, f"--trainer.callbacks+={timer}"]
        if setting.workers is not None:
            command += ["--data.num_workers", str(setting.workers)]
        env = {name: value for name, value in module_environment().items() if name not in THREAD_VARIABLES}
        env.update(setting.env)
        start = time.perf_counter()
        done = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"cpu_defaults: {setting.label} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        return {**json.loads(record.read_text()), "wall_seconds": wall, "stderr_notes": notes(done.stderr)}


def notes(stderr: str) -> list[str]:
    """The lines lintf itself wrote to stderr (its thread choice, a build), for the record."""
    return [line.strip() for line in stderr.splitlines() if line.startswith("lintf:")]


def measure(conditions: dict[str, bool], options: list[Setting], steps: int,
            repeats: int) -> tuple[dict[str, list[dict]], dict[str, tuple[float, float]]]:
    """Condition -> one row per setting (the median over repeats of step and wall seconds), and condition ->
    the 1-minute load average before and after its runs."""
    results, loads = {}, {}
    for condition, busy in conditions.items():
        runs: list[list[dict]] = [[] for _ in options]
        with busy_core(busy):
            before = os.getloadavg()[0]
            for _ in range(repeats):
                for setting, done in zip(options, runs):  # settings take turns: a change in load weighs on all alike
                    done.append(run_fit(setting, steps))
                    print(f"{condition:14s} {setting.label:55s} {done[-1]['seconds']:7.1f} s", flush=True)
            loads[condition] = (before, os.getloadavg()[0])
        results[condition] = [{
            "setting": setting.label, "environment": setting.env, "workers": setting.workers, "grid": setting.grid,
            "threads_used": done[-1]["threads"], "steps": done[-1]["steps"],
            "seconds": statistics.median(r["seconds"] for r in done),
            "wall_seconds": statistics.median(r["wall_seconds"] for r in done),
            "notes": done[-1]["stderr_notes"],
        } for setting, done in zip(options, runs)]
    return results, loads


def best(rows: list[dict]) -> dict:
    """The fastest OMP_NUM_THREADS x workers combination."""
    return min((row for row in rows if row["grid"]), key=lambda row: row["seconds"])


def default_over_best(rows: list[dict]) -> float:
    """Step time of lintf's defaults (the first row) over the fastest combination's."""
    return rows[0]["seconds"] / best(rows)["seconds"]


def report(results: dict[str, list[dict]], loads: dict[str, tuple[float, float]], command: str,
           cpus: int) -> list[str]:
    """The markdown: default against best per condition, then each condition's table."""
    lines = ["# CPU defaults: threads and DataLoader workers", "", f"`{command}` on {cpus} usable CPUs.", "",
             "Copy config (configs/copy.yaml) through the `lintf` command; step time: the first step's start to "
             "the last step's end; wall time: the whole command. lintf's defaults must stay within "
             f"{LIMIT}x of the best OMP_NUM_THREADS x workers combination (rows with OMP_WAIT_POLICY are shown, not "
             "compared: PyTorch's OpenMP reads it before lintf starts).", "",
             "| condition | lintf defaults (s) | best (s) | best setting | default / best |", "|---|---:|---:|---|---:|"]
    for condition, rows in results.items():
        fastest = best(rows)
        lines.append(f"| {condition} | {rows[0]['seconds']:.1f} | {fastest['seconds']:.1f} | {fastest['setting']} | "
                     f"{default_over_best(rows):.2f} |")
    for condition, rows in results.items():
        fastest = best(rows)["seconds"]
        lines += ["", f"## {condition}", "", f"Load average (1 min) before / after: {loads[condition][0]:.2f} / "
                  f"{loads[condition][1]:.2f}.", "",
                  "| setting | threads used | steps | step time (s) | wall time (s) | vs best |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {row['setting']} | {row['threads_used']} | {row['steps']} | {row['seconds']:.1f} | "
                  f"{row['wall_seconds']:.1f} | {row['seconds'] / fastest:.2f}x |" for row in rows]
        lines += [f"\nlintf said: {note}" for note in rows[0]["notes"]]
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive_int, default=400, help="training steps per run")
    parser.add_argument("--threads", type=positive_int, nargs="+", default=[1, 2], help="OMP_NUM_THREADS values")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="DataLoader worker counts")
    parser.add_argument("--repeats", type=positive_int, default=1, help="runs per setting (the median is kept)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory of cpu_defaults.{md,json}")
    args = parser.parse_args()
    if min(args.workers) < 0:
        parser.error(f"argument --workers: {min(args.workers)} is not allowed: give 0 or more")
    options = settings(args.threads, args.workers)
    results, loads = measure({"idle": False, "one core busy": True}, options, args.steps, args.repeats)
    command = " ".join(["python -m benchmarks.cpu_defaults", *sys.argv[1:]])
    cpus = len(os.sched_getaffinity(0))
    payload = {"command": command, "cpus": cpus, "limit": LIMIT, "results": results, "load_average": loads,
               "default_over_best": {condition: default_over_best(rows) for condition, rows in results.items()}}
    write_report(args.out, "cpu_defaults", report(results, loads, command, cpus), payload)


if __name__ == "__main__":
    main()
