"""Series regression (IF3270's many-to-one RNN with and without attention): the data against the seed's own
numbers, the models against loops written out here, Keras' parameter counts, training through the trainer, and
the `attnlab series` / `attnlab summary` commands."""

import json
import math
import statistics

import numpy as np
import pytest
import torch

from attnlab.app.cli import main
from attnlab.app.study import compare, train_series
from attnlab.core.errors import AttnlabError
from attnlab.families.series import (RegressionTask, SeriesDataConfig, fibonacci, load_series_config, make_splits,
                                     min_max_scale, windows)
from attnlab.nn.series import SeriesModelConfig, SeriesRNN

# tiny, fast settings: a short noisy sine, windows of 8
SMALL = ["series.task=sine", "series.length=240", "series.window=8", "series.noise=0.05", "train.max_epochs=25",
         "train.max_tokens=16", "train.eval_every=1000"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)  # (one torch thread for the whole suite: conftest; set here, it was never put back)


# ---------------------------------------------------------------------------------------------- data
def test_fibonacci_is_exact_and_scaled_as_in_the_seed():
    f = fibonacci(1200)
    assert f[:6] == [1, 2, 3, 5, 8, 13]
    assert all(a + b == c for a, b, c in zip(f, f[1:], f[2:]))
    assert f[-1] > 1e250 and f[-1] > float(np.finfo(np.float32).max)  # why the ints are scaled in float64
    x = min_max_scale(f)
    assert x.dtype == np.float64 and x[0] == 0.0 and x[-1] == 1.0
    # the seed's table "RNN with Attention: Context Vector", column "Atribut 1" (the first scaled inputs)
    # the table prints 5 significant digits: a relative rounding of up to 0.5e-4 / 2.2664 = 2.2e-5
    np.testing.assert_allclose(x[1:5], [2.2664e-251, 4.5327e-251, 9.0654e-251, 1.5865e-250], rtol=1e-4)
    # the scaled ratio of consecutive large values is the golden ratio
    # a few float64 roundings (eps 2.2e-16) and F(n+1)/F(n) - phi ~ phi^-2n: 1e-12 is 1000x the error
    assert abs(x[-1] / x[-2] - (1 + math.sqrt(5)) / 2) < 1e-12


def test_windows_and_the_seeds_split():
    X, y = windows(np.arange(30.0), 20)
    assert X.shape == (10, 20) and X[3].tolist() == list(range(3, 23)) and y[3] == 23
    s = make_splits(SeriesDataConfig())
    assert (len(s.train), len(s.test)) == (826, 354)  # int(0.7 * 1,180) train windows, the rest test
    assert s.dev is s.train  # dev_fraction 0: no held-out dev, as the seed
    # a partition (on the sine task: its windows are distinct; most Fibonacci windows are all 0 in float32)
    s2 = make_splits(SeriesDataConfig(task="sine"))
    rows = [{tuple(r) for r in d.X.tolist()} for d in (s2.train, s2.test)]
    assert not rows[0] & rows[1] and len(rows[0] | rows[1]) == 1180
    # unshuffled: the test windows are the last 30 % of the series; a dev set is cut from the training windows
    s = make_splits(SeriesDataConfig(shuffle=False, dev_fraction=0.1))
    assert (len(s.train), len(s.dev), len(s.test)) == (743, 83, 354)
    as_y = lambda a, b: torch.tensor(s.series[20 + a:20 + b], dtype=torch.float32)  # noqa: E731
    assert torch.equal(s.train.y, as_y(0, 743)) and torch.equal(s.dev.y, as_y(743, 826))
    assert torch.equal(s.test.y, as_y(826, 1180))


def test_config_errors_name_the_key():
    with pytest.raises(AttnlabError, match="series.task: 'fib' is not one of"):
        load_series_config(None, ["series.task=fib"])
    with pytest.raises(AttnlabError, match="dev_fraction > 0"):
        load_series_config(None, ["series.select=best"])
    with pytest.raises(AttnlabError, match="unknown config key model.units"):
        load_series_config(None, ["model.units=2"])


# ---------------------------------------------------------------------------------------------- model
def test_keras_parameter_counts():
    """The seed's tables: SimpleRNN(2) (1 + 2 + 1) * 2 = 8, attention H + T = 2 + 20 = 22, Dense(1) 2 + 1 = 3."""
    rnn = SeriesRNN(SeriesModelConfig(), 20)
    att = SeriesRNN(SeriesModelConfig(attention=True), 20)
    assert sum(p.numel() for p in rnn.rnn.parameters()) == (1 + 2 + 1) * 2
    assert sum(p.numel() for p in att.attention.parameters()) == 2 + 20
    assert sum(p.numel() for p in rnn.dense.parameters()) == 2 + 1
    assert sum(p.numel() for p in rnn.parameters()) == 11 and sum(p.numel() for p in att.parameters()) == 33


@pytest.mark.parametrize("attention", [False, True])
def test_model_matches_a_written_out_loop(attention):
    model = SeriesRNN(SeriesModelConfig(hidden_dim=3, attention=attention, init="torch"), 6).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()
    x = torch.rand(2, 6, dtype=torch.float64)
    pred, weights = model(x)
    cell = model.rnn.cells[0]
    for i in range(2):
        h, hs = torch.zeros(3, dtype=torch.float64), []
        for t in range(6):  # Keras SimpleRNN: h_t = tanh(W x_t + U h_{t-1} + b), one bias
            h = torch.tanh(cell.weight_ih[:, 0] * x[i, t] + cell.weight_hh @ h + cell.bias_ih)
            hs.append(h)
        if attention:
            e = torch.stack([torch.tanh(hs[t] @ model.attention.w + model.attention.b[t]) for t in range(6)])
            a = torch.exp(e) / torch.exp(e).sum()
            summary = sum(a[t] * hs[t] for t in range(6))
            torch.testing.assert_close(weights[i], a)
        else:
            summary = hs[-1]
            assert weights is None
        torch.testing.assert_close(pred[i], model.dense.weight[0] @ summary + model.dense.bias[0])


def test_regression_task_loss_is_summed_squared_error():
    model = SeriesRNN(SeriesModelConfig(attention=True), 8)
    s = make_splits(load_series_config(None, SMALL).series)
    batch = RegressionTask.collate([s.train[i] for i in range(5)])
    loss, n = RegressionTask.loss(model, batch, 0.0)
    pred, _ = model(batch.x)
    assert n == 5 and RegressionTask.perplexity is False
    torch.testing.assert_close(loss, torch.nn.functional.mse_loss(pred, batch.y, reduction="sum"))


# ---------------------------------------------------------------------------------------------- training
def test_training_through_the_trainer_beats_the_baselines(tmp_path):
    cfg = load_series_config(None, SMALL + ["model.attention=true", "model.hidden_dim=8", "train.lr=0.01"])
    splits = make_splits(cfg.series)
    untrained = SeriesRNN(cfg.model, cfg.series.window)
    before = float(((untrained(splits.test.X)[0].detach() - splits.test.y) ** 2).mean())
    r = train_series(cfg, tmp_path / "run", seed=1, splits=splits)
    train_mean = float(((splits.test.y - splits.train.y.mean()) ** 2).mean())
    assert r["test_mse"] < 0.5 * train_mean and r["test_mse"] < 0.5 * before
    assert r["steps"] == 25 * math.ceil(len(splits.train) / 16)  # 25 epochs of batches of 16 windows
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert "dev_ppl" not in json.loads(lines[-1]) and "dev_loss" in json.loads(lines[-1])


def test_cli_series_reports_mean_std_and_the_claim(tmp_path, capsys):
    out = tmp_path / "cmp"
    args = ["series", "sine", "--seeds", "2", "--out", str(out)] + [a for s in SMALL[1:] for a in ("--set", s)]
    assert main(args + ["--set", "train.max_epochs=4"]) == 0
    text = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    for name in ("rnn", "attention"):
        m = res["models"][name]
        mses = [r["test_mse"] for r in m["runs"]]
        assert [r["seed"] for r in m["runs"]] == [1, 2]
        assert m["test_mse_mean"] == pytest.approx(statistics.fmean(mses))
        assert m["test_mse_std"] == pytest.approx(statistics.stdev(mses))
        assert f"{m['test_mse_mean']:.4e} +/- {m['test_mse_std']:.4e}" in text
    assert (res["models"]["rnn"]["params"], res["models"]["attention"]["params"]) == (8 + 3, 8 + (2 + 8) + 3)
    holds = res["models"]["attention"]["test_mse_mean"] < res["models"]["rnn"]["test_mse_mean"]
    assert res["claim"]["holds_on_mean"] == holds
    assert ("holds on the mean" if holds else "does not hold on the mean") in text


def test_cli_user_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as e:  # the option's range, checked by argparse
        main(["series", "fib", "--seeds", "0"])
    assert e.value.code == 2 and "argument --seeds: 0 is below the minimum 1" in capsys.readouterr().err
    assert main(["series", "lorenz"]) == 2
    assert "series.task: 'lorenz' is not one of" in capsys.readouterr().err


def test_compare_same_data_for_every_seed(tmp_path):
    cfg = load_series_config(None, SMALL + ["train.max_epochs=1"])
    res = compare(cfg, [3, 4], tmp_path, variants=(False,), log=lambda _: None)
    assert "claim" not in res and len(res["models"]["rnn"]["runs"]) == 2
    assert res["baselines"]["zero"] == pytest.approx(float((make_splits(cfg.series).test.y.double() ** 2).mean()))


# ---------------------------------------------------------------------------------------------- summary
@pytest.mark.parametrize("config, rows, total", [
    ("configs/seed-fib-rnn.toml", [("ElmanCell", 8), ("Linear", 3)], 11),
    ("configs/seed-fib-attention.toml", [("ElmanCell", 8), ("LearnedQueryAttention", 22), ("Linear", 3)], 33),
    ("configs/seed-char-lstm.toml", [("LSTMCell", 4 * (74 + 256 + 1) * 256), ("LSTMCell", 4 * (78 + 256 + 1) * 256),
                                     ("Linear", (256 + 1) * 78)], 702_030),
])
def test_cli_summary_reproduces_the_seed_tables(config, rows, total, capsys):
    """IF3270's Keras tables: 8 + 3 = 11; 8 + 22 + 3 = 33; 338,944 + 343,040 + 20,046 = 702,030."""
    assert main(["summary", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    body = [line for line in lines[3:] if line and not line.startswith("=")][:-1]
    got = [(line.split("(")[1].split(")")[0], int(line.split()[-1].replace(",", ""))) for line in body]
    assert got == rows
    assert lines[-1] == f"Total params: {total:,}"
