"""benchmarks.associative_recall: the --quick smoke run trains one model per N and writes every (N, P) cell."""

import json

import pytest

from benchmarks.associative_recall import ATTENTIONS_COMPARED, cells, command_of, encoder_of, main, parse, settings_of
from lintf.registry import ATTENTIONS


def test_cells_leave_room_for_every_pair_and_query():
    assert cells([64, 128], [4, 16, 32]) == [(64, 4), (64, 16), (128, 4), (128, 16), (128, 32)]


def test_the_compared_attentions_are_registered_and_causal():
    assert all(ATTENTIONS.get(name).supports_causal for name in ATTENTIONS_COMPARED)
    assert {"gla", "delta_net", "gated_delta_net", "softmax", "linear", "gated_linear"} <= set(ATTENTIONS_COMPARED)


@pytest.mark.slow
def test_quick_run_writes_results(tmp_path):
    main(["--quick", "--attentions", "linear", "delta_net", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "associative_recall.json").read_text())
    assert saved["settings"]["quick"] and saved["settings"]["steps"] == 20
    assert set(saved["results"]) == {"linear", "delta_net"}
    for by_cell in saved["results"].values():
        assert set(by_cell) == {"32x2", "32x4"}
        assert all(0.0 <= cell["accuracy"] <= 1.0 for cell in by_cell.values())
        assert len({cell["train_seconds"] for cell in by_cell.values()}) == 1  # one model per N, tested per P
    table = (tmp_path / "associative_recall.md").read_text()
    assert "| N | pairs | delta_net | linear |" in table and table.count("\n| 32 |") == 2
    assert (tmp_path / "associative_recall.png").stat().st_size > 0
    (tmp_path / "associative_recall.md").unlink()
    main(["--replot", "--out", str(tmp_path)])  # the table and plot again, from the JSON alone
    assert (tmp_path / "associative_recall.md").read_text() == table

    main(["--quick", "--add", "--attentions", "gla", "--out", str(tmp_path)])  # one more column, the others kept
    merged = json.loads((tmp_path / "associative_recall.json").read_text())
    assert list(merged["results"]) == ["delta_net", "gla", "linear"]  # the usual order, whoever finished first
    assert merged["results"]["linear"] == saved["results"]["linear"]
    assert merged["settings"]["attentions"] == ["delta_net", "gla", "linear"]
    assert "| N | pairs | delta_net | gla | linear |" in (tmp_path / "associative_recall.md").read_text()


def test_columns_name_a_layer_recipe_or_a_hybrid_stack(capsys):
    args = parse(["--attentions", "gated_delta_net+recipe", "gated_delta_net+recipe,softmax", "--n-layers", "4"])
    recipe, hybrid = (encoder_of(column, args) for column in args.attentions)
    assert (recipe.attention_per_layer, recipe.layer_per_layer) == (["gated_delta_net"] * 4, ["recipe"] * 4)
    assert hybrid.attention_per_layer == ["gated_delta_net", "softmax"] * 2
    assert hybrid.layer_per_layer == ["recipe", "projections"] * 2
    for column, message in (("local+recipe", "only '+recipe' is allowed, for an attention with a layer recipe"),
                            ("gla+fla", "only '+recipe' is allowed"),
                            ("gla,nope", "'nope' in 'gla,nope' is not a causal")):
        with pytest.raises(SystemExit):
            parse(["--attentions", column])
        assert message in capsys.readouterr().err


def test_a_learning_rate_sweep_keeps_each_columns_best_rate(tmp_path, monkeypatch):
    import benchmarks.associative_recall as bench

    def train_length(attention, length, pairs, args, lr=None):  # accuracy peaks at lr 1e-3
        return {f"{length}x{p}": {"accuracy": 1.0 - abs(lr - 1e-3) * 100, "final_loss": 1.0, "train_seconds": 1.0,
                                  "lr": lr} for p in pairs}

    monkeypatch.setattr(bench, "train_length", train_length)
    main(["--quick", "--lr", "3e-4", "1e-3", "3e-3", "--attentions", "gla", "--out", str(tmp_path)])
    cell = json.loads((tmp_path / "associative_recall.json").read_text())["results"]["gla"]["32x2"]
    assert cell["lr"] == 1e-3 and set(cell["sweep"]) == {"0.0003", "0.001", "0.003"}
    assert "| 32 | lr chosen | 0.001 |" in (tmp_path / "associative_recall.md").read_text()


def test_the_table_names_the_command_that_made_it():
    settings = settings_of(parse(["--steps", "30", "--lengths", "64", "128", "--attentions", "gla"]))
    assert command_of(settings) == "python -m benchmarks.associative_recall --lengths 64 128 --steps 30"
    assert command_of(settings_of(parse(["--quick"]))) == "python -m benchmarks.associative_recall --quick"


def test_add_keeps_a_saved_column_until_this_run_replaces_it(tmp_path, monkeypatch):
    """A run side by side with another keeps the other's column of an attention it has not trained yet."""
    import benchmarks.associative_recall as bench

    def cells_with(accuracy: float, pairs=(2, 4)) -> dict:
        return {f"32x{p}": {"accuracy": accuracy, "final_loss": 1.0, "train_seconds": 1.0} for p in pairs}

    saved = tmp_path / "associative_recall.json"
    settings = {**settings_of(parse(["--quick"])), "attentions": ["gla"]}
    saved.write_text(json.dumps({"settings": settings, "results": {"gla": cells_with(0.5)}}))
    seen = []

    def train_length(attention, length, pairs, args, lr=None):  # what the file holds as each attention starts
        seen.append((attention, json.loads(saved.read_text())["results"]))
        return cells_with(0.9, pairs)

    monkeypatch.setattr(bench, "train_length", train_length)
    main(["--quick", "--add", "--attentions", "linear", "gla", "--out", str(tmp_path)])
    attention, before_gla = seen[1]
    assert attention == "gla" and set(before_gla) == {"linear", "gla"}  # linear written, gla's saved column kept
    assert before_gla["gla"]["32x2"]["accuracy"] == 0.5
    assert json.loads(saved.read_text())["results"]["gla"]["32x2"]["accuracy"] == 0.9  # then replaced


def test_add_refuses_results_of_other_settings(tmp_path, capsys):
    other = {**settings_of(parse(["--quick"])), "seed": 7, "attentions": ["linear"]}
    saved = tmp_path / "associative_recall.json"
    saved.write_text(json.dumps({"settings": other, "results": {"linear": {}}}))
    with pytest.raises(SystemExit, match="merges only results of the same settings"):
        main(["--quick", "--add", "--attentions", "gla", "--out", str(tmp_path)])
    assert json.loads(saved.read_text())["settings"] == other  # nothing trained, nothing overwritten


def test_no_cell_that_fits_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--lengths", "16", "--pairs", "8"])
    assert "no (N, P) with 4 P <= N" in capsys.readouterr().err
