"""``--shard fsdp``: parameters and optimizer state split over every device of every process.

The rules are unit-tested here on shapes (this process has one device); the sharded
training itself runs for real: 2 processes × 2 CPU devices joined by ``jax.distributed``
against 1 process on 1 device, in float64, and checkpoints crossing between the two.
"""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import optax
import pytest
import safetensors.numpy
from jax.sharding import PartitionSpec

from jaxgrad import losses, nn, optim
from jaxgrad.parity import assert_parity, compare
from jaxgrad.train import (
    Trainer,
    build_optimizer,
    opt_state_shardings,
    param_shardings,
    partition_spec,
)
from jaxgrad.train.fsdp import check_shard, shard_mesh, tensor_partition_spec
from jaxgrad.train.sharding import batch_sharding
from parity_tests.test_train_distributed import _finish, _free_port, _start

FLOAT64 = dict(rtol=1e-10, atol=1e-12)  # the float64 tier (docs/parity.md)


# -- the rule, on shapes ---------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, devices, expected",
    [
        ((256, 64), 4, PartitionSpec("fsdp")),  # Linear (out, in): out_features
        ((256,), 4, PartitionSpec("fsdp")),  # its bias
        ((10, 128), 4, PartitionSpec(None, "fsdp")),  # 10 classes do not divide: in_features
        ((10,), 4, PartitionSpec()),  # a small bias that does not divide: replicated
        ((), 4, PartitionSpec()),  # a scalar
        ((16, 3, 3, 3), 4, PartitionSpec("fsdp")),  # Conv2d OIHW: out channels
        ((6, 8, 8), 4, PartitionSpec(None, "fsdp")),  # two equal largest dims: the first
        ((12, 16), 8, PartitionSpec(None, "fsdp")),  # only dim 1 divides by 8
        ((12, 24), 8, PartitionSpec(None, "fsdp")),
        ((3, 5), 4, PartitionSpec()),  # odd sizes
        ((256, 64), 1, PartitionSpec()),  # one device: nothing to split
        ((512, 64), 2, PartitionSpec("fsdp")),
    ],
)
def test_partition_spec_splits_dim_0_else_the_largest_dividing_dim(shape, devices, expected):
    assert partition_spec(shape, devices) == expected


TENSOR_PARAMS = {  # torch shapes of a small transformer block and its neighbours
    "embed.weight": (100, 16),  # Embedding (num, dim): vocabulary rows
    "attn.in_proj_weight": (48, 16),  # q, k, v rows (3E, E)
    "attn.in_proj_bias": (48,),
    "attn.out_proj.weight": (16, 16),
    "attn.out_proj.bias": (16,),
    "norm.weight": (16,),  # a norm's weight: no matrix to pair with
    "conv.weight": (16, 3, 3, 3),  # convolutions are not split by rows here
    "conv.bias": (16,),
    "head.weight": (10, 16),  # 10 classes do not divide by 4: replicated, and its bias
    "head.bias": (10,),
}


@pytest.mark.parametrize(
    "key, expected",
    [
        ("embed.weight", PartitionSpec("tensor")),
        ("attn.in_proj_weight", PartitionSpec("tensor")),
        ("attn.in_proj_bias", PartitionSpec("tensor")),
        ("attn.out_proj.weight", PartitionSpec("tensor")),
        ("attn.out_proj.bias", PartitionSpec("tensor")),
        ("norm.weight", PartitionSpec()),
        ("conv.weight", PartitionSpec()),
        ("conv.bias", PartitionSpec()),
        ("head.weight", PartitionSpec()),
        ("head.bias", PartitionSpec()),
    ],
)
def test_tensor_rule_splits_matrices_by_rows_and_their_biases(key, expected):
    params = {k: jax.ShapeDtypeStruct(shape, "float32") for k, shape in TENSOR_PARAMS.items()}
    assert tensor_partition_spec(key, TENSOR_PARAMS[key], params, 4) == expected
    # one device on the tensor axis: nothing is split
    assert tensor_partition_spec(key, TENSOR_PARAMS[key], params, 1) == PartitionSpec()


def test_bad_shard_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match=r"`fsdp_size` \(=0\) must be an int >= 1"):
        partition_spec((4,), 0)
    with pytest.raises(ValueError, match=r"`shard` \(='zero3'\) must be one of none, data, fsdp"):
        check_shard("zero3")
    device = jax.devices()[0]
    with pytest.raises(ValueError, match=r"`shard` \(='none'\) trains on one device; `devices`"):
        shard_mesh("none", [device, device])


def test_optimizer_state_follows_its_parameter_and_scalars_are_replicated():
    """The specs 4 devices would get (on this process's one device: a 1 × 1 mesh with
    the same axis names, so every spec is valid and only the specs are compared)."""
    model = nn.mlp([64, 256, 128, 10], "relu")
    params = jax.eval_shape(model.init, jax.random.key(0))
    mesh = shard_mesh("fsdp", jax.devices()[:1])
    assert mesh.axis_names == ("data", "fsdp")
    shardings = {
        k: jax.sharding.NamedSharding(mesh, partition_spec(v.shape, 4)) for k, v in params.items()
    }
    optimizer = build_optimizer(optim.adam(lr=1e-3), clip=1.0)
    state = jax.eval_shape(optimizer.init, params)
    specs = {
        jax.tree_util.keystr(path): s.spec
        for path, s in jax.tree_util.tree_flatten_with_path(
            opt_state_shardings(state, params, shardings, mesh)
        )[0]
    }
    for key, value in params.items():
        for moment in ("exp_avg", "exp_avg_sq"):
            (path,) = [p for p in specs if p.endswith(f".{moment}['{key}']")]
            assert specs[path] == partition_spec(value.shape, 4), path
    assert specs["[1][0].step"] == PartitionSpec()  # the step count
    assert specs["[1][0].exp_avg['4.weight']"] == PartitionSpec(None, "fsdp")
    assert specs["[1][0].exp_avg['4.bias']"] == PartitionSpec()
    # keyed like a parameter but not of its shape: not a mirror of it, replicated
    odd = opt_state_shardings({"0.weight": np.zeros(3)}, params, shardings, mesh)
    assert odd["0.weight"].spec == PartitionSpec()
    # without an fsdp axis ("data", "none") every parameter is replicated
    data_mesh = shard_mesh("data", jax.devices()[:1])
    assert {s.spec for s in param_shardings(params, data_mesh).values()} == {PartitionSpec()}
    # the batch is split over every axis of either mesh: all the devices
    assert batch_sharding(mesh).spec == PartitionSpec(("data", "fsdp"))
    assert batch_sharding(data_mesh, stacked=True).spec == PartitionSpec(None, "batch")


def test_fsdp_trainer_keeps_its_shardings_and_the_callers_params(x64):
    """On one device fsdp replicates (nothing divides over 1), but the step runs its
    sharding constraints; the caller's params survive the donating step."""
    model = nn.mlp([8, 16, 3], "tanh", dtype="float64")
    params = model.init(jax.random.key(0))
    x = np.random.default_rng(0).normal(size=(32, 8))
    y = np.arange(32) % 3
    results = {}
    for shard in ("none", "data", "fsdp"):
        trainer = Trainer(
            model, losses.cross_entropy, optax.sgd(0.1, momentum=0.9), params, batch_size=8,
            strategy="epoch", shard=shard,
        )  # fmt: skip
        trainer.train_epoch(x, y)
        assert trainer.shard == shard
        assert {k: v.sharding for k, v in trainer.params.items()} == trainer.param_shardings
        results[shard] = model.state_dict(trainer.params)
    assert not any(v.is_deleted() for v in params.values())
    assert {v.dtype for v in results["fsdp"].values()} == {np.dtype("float64")}
    assert_parity(results["none"], results["fsdp"], rtol=0, atol=0)  # one device: the same bits
    assert_parity(results["none"], results["data"], rtol=0, atol=0)


# -- real processes: 2 × 2 devices, fsdp, against 1 × 1 ----------------------------------

# 1437 digits // 128 = 11 steps of plain SGD with momentum, a checkpoint every 4 steps
# (4, 8, and the final 11; the newest two are kept)
RUN = ("--precision", "float64", "--epochs", "1", "--batch-size", "128", "--framework", "jax")
RUN += ("--strategy", "step", "--no-progress", "--checkpoint-dir", "ck", "--checkpoint-every", "4")


def _two_by_two(cwd, *extra):
    port = _free_port()
    return [_start(cwd, RUN + extra, devices=2, process=i, processes=2, port=port) for i in (0, 1)]


def _checkpoint_files(directory, name, file="params.safetensors"):
    return safetensors.numpy.load_file(str(directory / "ck" / name / file))


# long (~70 s on 2 busy cores: two rounds of three training processes): CI's
# -m "exhaustive or long" run
@pytest.mark.long
def test_fsdp_over_two_processes_equals_one_device_and_checkpoints_cross(tmp_path):
    """(a) 2 processes × 2 CPU devices with --shard fsdp end where 1 process on 1 device
    ends (parameters and optimizer state at the float64 tier), each device holding a
    quarter of every parameter that divides; (b) the 2 × 2 run's step-8 checkpoint
    resumed in 1 process on 1 device, and the 1 × 1 run's resumed in 2 × 2, end there too.
    """
    two, one = tmp_path / "two", tmp_path / "one"
    two.mkdir(), one.mkdir()
    done = _finish(
        _two_by_two(two, "--shard", "fsdp", "--json", "run.json")
        + [_start(one, RUN + ("--shard", "none", "--json", "run.json"), devices=1)]
    )
    for _out, err, rc in done:
        assert rc == 0, err[-3000:]
    assert "parameters and optimizer state sharded (fsdp)" in done[0][0]
    final = "ckpt-00000011"
    reference = _checkpoint_files(one, final)
    sharded = _checkpoint_files(two, final)
    assert {v.dtype for v in reference.values()} == {np.dtype("float64")}
    assert_parity(reference, sharded, **FLOAT64)
    assert_parity(
        _checkpoint_files(one, final, "opt_state.safetensors"),
        _checkpoint_files(two, final, "opt_state.safetensors"),
        **FLOAT64,
    )
    # _should_fail: the same comparison catches one parameter 1e-8 off
    nudged = dict(sharded, **{"2.weight": sharded["2.weight"] * (1 + 1e-8)})
    assert not compare(reference, nudged, **FLOAT64).passed

    record = json.loads((two / "run.json").read_text())
    assert (record["processes"], record["devices"], record["shard"]) == (2, 4, "fsdp")
    assert json.loads((one / "run.json").read_text())["shard"] == "none"
    # the bytes from the shapes: a parameter with a dimension that divides by 4 is split
    # in four, any other (the 10-class bias) is on every device in full
    total = sum(v.nbytes for v in reference.values())
    replicated = sum(v.nbytes for v in reference.values() if all(d % 4 for d in v.shape))
    assert 0 < replicated < total / 100
    assert record["param_bytes"] == total
    assert record["param_bytes_per_device"] == (total - replicated) // 4 + replicated

    # (b) each run's step-8 checkpoint resumed by the other kind of run
    for directory in (two, one):
        shutil.copytree(directory / "ck", directory.with_name(directory.name + "-resumed") / "ck")
    resumed_two, resumed_one = tmp_path / "two-resumed", tmp_path / "one-resumed"
    resume = ("--resume-from", "ckpt-00000008")
    done = _finish(
        _two_by_two(resumed_one, "--shard", "fsdp", *resume)  # 1 × 1's checkpoint in 2 × 2
        + [_start(resumed_two, RUN + ("--shard", "none", *resume), devices=1)]
    )
    for _out, err, rc in done:
        assert rc == 0, err[-3000:]
    assert "jax resumed from step 8" in done[0][0] and "jax resumed from step 8" in done[2][0]
    assert_parity(reference, _checkpoint_files(resumed_two, final), **FLOAT64)
    assert_parity(reference, _checkpoint_files(resumed_one, final), **FLOAT64)


# long (~40 s: three processes capturing and training a converted model): CI's long run
@pytest.mark.long
def test_converted_batchnorm_model_over_two_processes_equals_one_device(tmp_path):
    """A user's torch model with BatchNorm (converted with from_torch, trained with its
    buffers) under --shard fsdp on 2 processes × 2 devices: the batch statistics are the
    global batch's, so parameters and running statistics end where one device's run
    ends, at the float64 tier; --save gathers the sharded parameters."""
    from parity_tests.test_train_converted import MODEL_FILE

    (tmp_path / "usernet.py").write_text(MODEL_FILE)
    run = ("--model", f"{tmp_path / 'usernet.py'}:Net", "--kwargs", '{"width": 8}')
    run += ("--precision", "float64", "--epochs", "1", "--batch-size", "128")
    run += ("--strategy", "step", "--no-progress", "--save", "p.safetensors")
    two, one = tmp_path / "two", tmp_path / "one"
    two.mkdir(), one.mkdir()
    port = _free_port()
    done = _finish(
        [
            _start(two, run + ("--shard", "fsdp"), devices=2, process=i, processes=2, port=port)
            for i in (0, 1)
        ]
        + [_start(one, run + ("--shard", "none"), devices=1)]
    )
    for _out, err, rc in done:
        assert rc == 0, err[-3000:]
    sharded = safetensors.numpy.load_file(str(two / "p.safetensors"))
    reference = safetensors.numpy.load_file(str(one / "p.safetensors"))
    assert {"bn.running_mean", "bn.running_var", "fc.weight"} <= set(reference)
    assert reference["bn.num_batches_tracked"] == sharded["bn.num_batches_tracked"] == 11
    assert_parity(reference, sharded, **FLOAT64)
    # _should_fail: the same comparison catches the running variance 1e-8 off
    nudged = dict(sharded, **{"bn.running_var": sharded["bn.running_var"] * (1 + 1e-8)})
    assert not compare(reference, nudged, **FLOAT64).passed


# long (~30 s: three training processes): CI's long run
@pytest.mark.long
def test_tensor_over_two_processes_equals_one_device(tmp_path):
    """--shard tensor on 2 processes × 2 devices (a (2, 2) mesh: the batch split over
    the processes, every matrix's rows over each process's two devices) ends where one
    device ends at the float64 tier, and each device holds half of every split matrix."""
    run = RUN[: RUN.index("--checkpoint-dir")] + ("--save", "p.safetensors", "--json", "r.json")
    two, one = tmp_path / "two", tmp_path / "one"
    two.mkdir(), one.mkdir()
    port = _free_port()
    done = _finish(
        [
            _start(two, run + ("--shard", "tensor"), devices=2, process=i, processes=2, port=port)
            for i in (0, 1)
        ]
        + [_start(one, run + ("--shard", "none"), devices=1)]
    )
    for _out, err, rc in done:
        assert rc == 0, err[-3000:]
    assert "split over each process's devices (tensor)" in done[0][0]
    reference = safetensors.numpy.load_file(str(one / "p.safetensors"))
    split = safetensors.numpy.load_file(str(two / "p.safetensors"))
    assert_parity(reference, split, **FLOAT64)
    record = json.loads((two / "r.json").read_text())
    assert (record["processes"], record["devices"], record["shard"]) == (2, 4, "tensor")
    # by hand from the MLP's shapes: matrices with rows that divide by 2, and their biases,
    # are halved on each device; the rest is whole on every device
    halved = sum(
        v.nbytes
        for k, v in reference.items()
        if tensor_partition_spec(k, v.shape, reference, 2) != PartitionSpec()
    )
    assert halved > 0.9 * sum(v.nbytes for v in reference.values())
    assert record["param_bytes_per_device"] == record["param_bytes"] - halved // 2
