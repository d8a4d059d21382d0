"""scripts/vanishing.py on small sizes: relations, never timings."""

from __future__ import annotations

import json

import numpy as np
import pytest
import vanishing

from jaxgrad.parity import assert_parity


def test_vanishing_script_relations(tmp_path):
    png, out = tmp_path / "v.png", tmp_path / "v.json"
    results = vanishing.main(["--quick", "--plot", str(png), "--json", str(out)])
    assert png.stat().st_size > 10_000 and json.loads(out.read_text())["dataset"] == "digits"
    relu, sigmoid = results["table"]["relu"], results["table"]["sigmoid"]
    assert len(relu["jax"]) == len(sigmoid["torch"]) == 7
    for rows in (relu, sigmoid, results["sigmoid_stack_12"], results["sigmoid_net_10"]):
        assert_parity(np.array(rows["torch"], np.float32), np.array(rows["jax"], np.float32))
    # sigmoid: each layer's norm above the one before it (monotonic decay backwards)
    assert np.all(np.diff(np.log(sigmoid["torch"])) > 0)
    assert sigmoid["ratio_torch"] > 100 * relu["ratio_torch"]
    assert sigmoid["verdict"] == "vanishing"
    stack = results["sigmoid_stack_12"]["torch"]
    assert len(stack) == 12 and stack[-1] / stack[0] > 1e6
    net = results["sigmoid_net_10"]["torch"]
    assert len(net) == 10 and 1e-11 < net[0] / net[-1] < 1e-6  # lesson 004: ≈ 1e-8


def test_scalar_chains_match_lessons():
    chains = vanishing.scalar_chains()
    for side in ("jax", "torch"):
        assert round(chains["sigmoid_chain_20"][side], 15) == 1.14e-13
        assert chains["times3_20"][side] == 3**20 == 3486784401
        assert chains["times3_20"][side + "_float32"] != 3**20  # float32 cannot hold it
        assert chains["sigmoid_bound"]["6"][side] == 2.0**-12
        assert chains["sigmoid_bound"]["10"][side] == 2.0**-20


def test_fashion_mnist_path_and_missing_directory(tmp_path, rng, capsys):
    from jaxgrad import data
    from parity_tests.test_data import write_fashion

    write_fashion(tmp_path, rng, n_train=8, n_test=2)
    rows = vanishing.lesson_table(
        data.load_dataset("fashion-mnist", data_dir=tmp_path),
        "sigmoid",
        width=8,
        depth=6,
        batch_size=4,
        seed=0,
    )
    assert len(rows["torch"]) == 7 and rows["layers"][-1] == "12"
    assert_parity(np.array(rows["torch"], np.float32), np.array(rows["jax"], np.float32))
    with pytest.raises(SystemExit) as info:  # found before anything is loaded
        vanishing.main(["--dataset", "fashion-mnist", "--data-dir", str(tmp_path / "missing")])
    assert info.value.code == 2
    assert "--data-dir" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as info:  # a directory without the IDX files
        vanishing.main(["--dataset", "fashion-mnist", "--data-dir", str(tmp_path / "empty")])
    assert info.value.code == 2
    assert "error: cannot load fashion-mnist" in capsys.readouterr().err
