import functools
import lintf.run.loggers as loggers
from tests.journeys import test_run_directory as t
from tests.journeys.test_run_directory import offline_wandb  # noqa

def test_anonymous(tmp_path, offline_wandb, capfd, monkeypatch):
    real = loggers.WandbLogger.__init__
    @functools.wraps(real)
    def init(self, *a, **k):
        real(self, *a, **k)
        self._wandb_init["anonymous"] = None
    monkeypatch.setattr(loggers.WandbLogger, "__init__", init)
    t.test_wandb_files_go_under_the_root_and_a_test_continues_the_wandb_run(tmp_path, offline_wandb, capfd)
