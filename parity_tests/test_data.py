"""jaxgrad.data: digits split, FashionMNIST IDX reader, deterministic batching.

Expected values come from scikit-learn's raw arrays, from IDX files these tests write
byte by byte, and from torch's own iteration over the same numpy arrays.
"""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
import torch

from jaxgrad import data
from torchref import data as torch_data


def write_idx(path, array, *, magic=None, gz=False, truncate=0):
    array = np.asarray(array, dtype=np.uint8)
    magic = magic if magic is not None else (0x08 << 8) | array.ndim
    raw = struct.pack(">I", magic) + struct.pack(">" + "I" * array.ndim, *array.shape)
    raw += array.tobytes()
    if truncate:
        raw = raw[:-truncate]
    if gz:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wb") as handle:
            handle.write(raw)
    else:
        path.write_bytes(raw)
    return path


def write_fashion(directory, rng, *, n_train=5, n_test=3, gz=False):
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28)),
        "train-labels-idx1-ubyte": rng.integers(0, 10, n_train),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_test, 28, 28)),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, n_test),
    }
    for stem, array in arrays.items():
        write_idx(directory / stem, array, gz=gz)
    return arrays


def test_digits_are_sklearn_pixels_over_16_split_stratified():
    from sklearn.datasets import load_digits as sk

    bunch = sk()
    ds = data.load_digits()
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.x_train.shape == (1438, 64) and ds.x_test.shape == (359, 64)
    assert ds.image_shape == (8, 8) and ds.num_classes == 10 and ds.name == "digits"
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() == 1.0
    # every image appears exactly once across the split, with its label
    everything = np.concatenate([ds.x_train, ds.x_test]) * 16
    labels = np.concatenate([ds.y_train, ds.y_test])
    order = np.lexsort(np.concatenate([everything, labels[:, None]], 1).T)
    ref = np.concatenate([bunch.data, bunch.target[:, None]], 1)
    ref_order = np.lexsort(ref.T)
    np.testing.assert_array_equal(everything[order], bunch.data[ref_order])
    np.testing.assert_array_equal(labels[order], bunch.target[ref_order])
    # stratified: each class's test share is within one image of 20 %
    for label in range(10):
        n_class = int((bunch.target == label).sum())
        assert abs(int((ds.y_test == label).sum()) - 0.2 * n_class) <= 0.5


def test_digits_split_deterministic_and_seeded():
    a, b, c = data.load_digits(seed=3), data.load_digits(seed=3), data.load_digits(seed=4)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    assert not np.array_equal(a.x_test, c.x_test)
    assert data.load_digits(dtype="float64").x_train.dtype == np.float64
    with pytest.raises(ValueError, match="test_fraction"):
        data.load_digits(test_fraction=1.5)
    with pytest.raises(ValueError, match="dtype"):
        data.load_digits(dtype="int32")


@pytest.mark.parametrize("gz", [False, True])
def test_fashion_mnist_reader_matches_written_bytes(tmp_path, rng, gz):
    arrays = write_fashion(tmp_path, rng, gz=gz)
    ds = data.load_fashion_mnist(tmp_path)
    assert ds.x_train.shape == (5, 784) and ds.x_test.shape == (3, 784)
    assert ds.x_train.dtype == np.float32 and ds.y_test.dtype == np.int64
    assert ds.image_shape == (28, 28) and ds.name == "fashion-mnist"
    expected = arrays["train-images-idx3-ubyte"].reshape(5, 784) / 255.0
    np.testing.assert_array_equal(ds.x_train, expected.astype(np.float32))
    np.testing.assert_array_equal(ds.y_test, arrays["t10k-labels-idx1-ubyte"])


def test_fashion_mnist_from_environment(tmp_path, rng, monkeypatch):
    write_fashion(tmp_path, rng)
    monkeypatch.setenv(data.FASHION_MNIST_ENV, str(tmp_path))
    assert data.load_fashion_mnist().x_train.shape == (5, 784)
    monkeypatch.delenv(data.FASHION_MNIST_ENV)
    with pytest.raises(ValueError, match="JAXGRAD_FASHION_MNIST_DIR"):
        data.load_fashion_mnist()


def test_fashion_mnist_missing_file_named(tmp_path, rng):
    write_fashion(tmp_path, rng)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte.*missing"):
        data.load_fashion_mnist(tmp_path)


def test_fashion_mnist_bad_magic_named(tmp_path, rng):
    write_fashion(tmp_path, rng)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(5), magic=0x00000803)
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte: bad magic number 0x00000803"):
        data.load_fashion_mnist(tmp_path)


def test_fashion_mnist_truncated_named(tmp_path, rng):
    write_fashion(tmp_path, rng)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", np.zeros((3, 28, 28)), truncate=7)
    with pytest.raises(
        ValueError, match="t10k-images-idx3-ubyte: truncated.*2352 bytes.*found 2345"
    ):
        data.load_fashion_mnist(tmp_path)


def test_fashion_mnist_count_mismatch_named(tmp_path, rng):
    write_fashion(tmp_path, rng)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(4))
    with pytest.raises(ValueError, match="count mismatch.*5 images.*4 labels"):
        data.load_fashion_mnist(tmp_path)


def test_batch_indices_partition_and_determinism():
    batches = data.batch_indices(10, 4, seed=1, epoch=2)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert all(b.dtype == np.int64 for b in batches)
    np.testing.assert_array_equal(np.sort(np.concatenate(batches)), np.arange(10))
    again = data.batch_indices(10, 4, seed=1, epoch=2)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again))
    other_epoch = np.concatenate(data.batch_indices(10, 4, seed=1, epoch=3))
    assert not np.array_equal(np.concatenate(batches), other_epoch)
    assert [len(b) for b in data.batch_indices(10, 4, seed=1, epoch=2, drop_last=True)] == [4, 4]
    plain = data.batch_indices(5, 2, seed=1, epoch=0, shuffle=False)
    assert [b.tolist() for b in plain] == [[0, 1], [2, 3], [4]]
    with pytest.raises(ValueError, match="batch_size"):
        data.batch_indices(10, 0, seed=0, epoch=0)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("num_examples,batch_size", [(12, 4), (10, 4), (3, 4), (5, 1)])
def test_unshuffled_batches_are_torchs_batch_sampler(num_examples, batch_size, drop_last):
    """``drop_last`` drops only an incomplete last batch, as torch's ``BatchSampler``."""
    expected = list(torch.utils.data.BatchSampler(range(num_examples), batch_size, drop_last))
    got = data.batch_indices(
        num_examples, batch_size, seed=0, epoch=0, shuffle=False, drop_last=drop_last
    )
    assert [b.tolist() for b in got] == expected


def test_jax_and_torch_batches_identical(rng):
    x = rng.normal(size=(11, 3)).astype(np.float32)
    y = np.arange(11, dtype=np.int64)
    ours = list(data.iterate_batches(x, y, 4, seed=7, epoch=5))
    theirs = list(torch_data.iterate_batches(x, y, 4, seed=7, epoch=5))
    assert len(ours) == len(theirs) == 3
    for (xa, ya), (xb, yb) in zip(ours, theirs):
        assert isinstance(xb, torch.Tensor) and yb.dtype == torch.int64
        np.testing.assert_array_equal(xa, xb.numpy())
        np.testing.assert_array_equal(ya, yb.numpy())
    with pytest.raises(ValueError, match="`y` has 3"):
        next(data.iterate_batches(x, y[:3], 4, seed=0, epoch=0))


def test_fashion_mnist_corrupt_gzip_and_bad_labels_named(tmp_path, rng):
    write_fashion(tmp_path, rng)
    (tmp_path / "train-images-idx3-ubyte").unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz: not a readable gzip"):
        data.load_fashion_mnist(tmp_path)
    write_fashion(tmp_path, rng)
    (tmp_path / "train-images-idx3-ubyte.gz").unlink()
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2, 12]))
    with pytest.raises(ValueError, match="t10k-labels-idx1-ubyte: label 12 outside"):
        data.load_fashion_mnist(tmp_path)
    with pytest.raises(FileNotFoundError, match="not a directory"):
        data.load_fashion_mnist(tmp_path / "nowhere")
