"""Datasets and deterministic batching shared by both frameworks.

Contract: every loader returns a ``Dataset`` of **numpy** arrays — framework-neutral,
so torch (``torch.from_numpy``) and JAX (``jnp.asarray``) consume the very same
bytes. Images are scaled to ``[0, 1]`` (flattened to ``(n, features)`` for the
built-in grayscale sets, ``(n, C, H, W)`` for an image folder: ``Dataset`` says the
one rule); token sequences are int64 ids; labels are ``int64``. Batch order is a pure
function of ``(seed, epoch)``: both frameworks see the same batches in the same order,
and a resumed run regenerates any epoch's order without saved state. This module
never imports torch.

- ``load_digits``: scikit-learn's bundled 8×8 digits (1,797 real images), the
  embedded default — no download.
- ``load_fashion_mnist``: the standard FashionMNIST IDX files from a local directory
  (argument or ``$JAXGRAD_FASHION_MNIST_DIR``), gzipped or not.
- ``load_image_folder`` and ``load_token_npz`` (from ``jaxgrad.data_files``): the
  user's own images in torchvision's ``ImageFolder`` layout, and token sequences in
  an ``.npz``.
- ``detect_data_dir`` and ``load_dataset``: which of those a path holds, and loading it.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from jaxgrad._dataset import Dataset, float_dtype, stratified_split
from jaxgrad.data_files import load_image_folder, load_token_npz

__all__ = [
    "Dataset",
    "load_digits",
    "load_fashion_mnist",
    "load_image_folder",
    "load_token_npz",
    "detect_data_dir",
    "load_dataset",
    "stratified_split",
    "read_idx",
    "fashion_mnist_dir",
    "batch_indices",
    "iterate_batches",
    "digit_tokens",
]

FASHION_MNIST_ENV = "JAXGRAD_FASHION_MNIST_DIR"
FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
IDX_UBYTE_TYPE = 0x08  # the third magic byte: element type unsigned byte


def load_digits(*, test_fraction: float = 0.2, seed: int = 0, dtype="float32") -> Dataset:
    """scikit-learn's 8×8 handwritten digits, split train/test deterministically.

    Pixels (0…16 in the source) are divided by 16. The split is stratified by class
    from ``seed``: 1,797 images → 1,438 train / 359 test at the default 0.2.

    Returns:
      ``Dataset`` with `x_*` of shape `(n, 64)`, 10 classes, ``image_shape=(8, 8)``.
    """
    from sklearn.datasets import load_digits as _sklearn_digits

    dtype = float_dtype(dtype)
    bunch = _sklearn_digits()
    images = (np.asarray(bunch.data, dtype=np.float64) / 16.0).astype(dtype)
    labels = np.asarray(bunch.target, dtype=np.int64)
    train, test = stratified_split(labels, test_fraction, seed)
    return Dataset(
        images[train],
        labels[train],
        images[test],
        labels[test],
        num_classes=10,
        name="digits",
        image_shape=(8, 8),
    )


def _open_idx(directory: Path, stem: str) -> tuple[Path, bytes]:
    for candidate in (directory / stem, directory / (stem + ".gz")):
        if candidate.is_file():
            if candidate.suffix == ".gz":
                try:
                    with gzip.open(candidate, "rb") as handle:
                        return candidate, handle.read()
                except (OSError, EOFError) as error:
                    raise ValueError(f"{candidate}: not a readable gzip file ({error}).") from error
            return candidate, candidate.read_bytes()
    raise FileNotFoundError(
        f"FashionMNIST file {stem!r} (or {stem}.gz) is missing from {directory}. Download the "
        "four IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
        "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte) into that directory."
    )


def read_idx(path, data: bytes | None = None, *, ndim: int) -> np.ndarray:
    """Parse an IDX file of unsigned bytes with ``ndim`` dimensions.

    The format: two zero bytes, a type byte (0x08 = uint8), a byte giving the number
    of dimensions, then each dimension as a big-endian uint32, then the data.
    Raises ``ValueError`` naming the file on a bad magic number or truncated data.
    """
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    if len(data) < 4:
        raise ValueError(
            f"{path}: truncated — {len(data)} bytes, shorter than the 4-byte magic number."
        )
    zero0, zero1, kind, dims = data[:4]
    expected_magic = (IDX_UBYTE_TYPE << 8) | ndim
    if zero0 or zero1 or kind != IDX_UBYTE_TYPE or dims != ndim:
        magic = struct.unpack(">I", data[:4])[0]
        raise ValueError(
            f"{path}: bad magic number 0x{magic:08x}, expected 0x{expected_magic:08x} "
            f"(unsigned bytes, {ndim} dimension{'s' if ndim > 1 else ''}); is this the right file?"
        )
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(
            f"{path}: truncated header — {len(data)} bytes, expected at least {header}."
        )
    shape = struct.unpack(">" + "I" * ndim, data[4:header])
    expected = int(np.prod(shape))
    present = len(data) - header
    if present != expected:
        raise ValueError(
            f"{path}: truncated or oversized — header says shape {tuple(shape)} = {expected} "
            f"bytes of data, found {present}."
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def fashion_mnist_dir(data_dir=None) -> Path:
    """The directory to read FashionMNIST from: ``data_dir``, else ``$JAXGRAD_FASHION_MNIST_DIR``."""
    if data_dir is None:
        data_dir = os.environ.get(FASHION_MNIST_ENV)
        if not data_dir:
            raise ValueError(
                f"`data_dir` is None and ${FASHION_MNIST_ENV} is not set: give the directory "
                "holding the FashionMNIST IDX files."
            )
    directory = Path(data_dir).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"`data_dir` (={str(directory)!r}) is not a directory.")
    return directory


def load_fashion_mnist(data_dir=None, *, dtype="float32") -> Dataset:
    """FashionMNIST from its four IDX files (each optionally ``.gz``).

    Pixels are divided by 255 and flattened to 784; the split is the official one
    (60,000 train / 10,000 test).

    Args:
      data_dir: directory with the files; ``None`` reads ``$JAXGRAD_FASHION_MNIST_DIR``.
      dtype: floating dtype of the images.
    """
    dtype = float_dtype(dtype)
    directory = fashion_mnist_dir(data_dir)
    arrays = {}
    for key, stem in FASHION_MNIST_FILES.items():
        path, data = _open_idx(directory, stem)
        arrays[key] = (path, read_idx(path, data, ndim=3 if key.endswith("images") else 1))
    splits = []
    for split in ("train", "test"):
        image_path, images = arrays[f"{split}_images"]
        label_path, labels = arrays[f"{split}_labels"]
        if images.shape[0] != labels.shape[0]:
            raise ValueError(
                f"count mismatch: {image_path} holds {images.shape[0]} images but "
                f"{label_path} holds {labels.shape[0]} labels."
            )
        if labels.size and labels.max() > 9:
            raise ValueError(f"{label_path}: label {int(labels.max())} outside 0…9.")
        flat = (images.reshape(images.shape[0], -1).astype(np.float64) / 255.0).astype(dtype)
        splits += [flat, labels.astype(np.int64)]
    image_shape = tuple(int(d) for d in arrays["train_images"][1].shape[1:])
    return Dataset(*splits, num_classes=10, name="fashion-mnist", image_shape=image_shape)


DATA_LAYOUTS = (
    "a directory with the FashionMNIST IDX files (train-images-idx3-ubyte, "
    "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each "
    "optionally .gz)",
    "an image folder: a directory with one subdirectory of images per class "
    "(torchvision's ImageFolder), or with train/ and val/ (or test/) directories of that form",
    "a .npz file with `tokens` (n, length) and `labels` (n,) integer arrays",
)
"""What ``detect_data_dir`` recognises, in words (its errors list them)."""


def _layouts() -> str:
    return "; ".join(f"({number}) {layout}" for number, layout in enumerate(DATA_LAYOUTS, 1))


def detect_data_dir(path) -> str:
    """Which kind of data ``path`` holds, from its layout alone (nothing is decoded).

    - ``"fashion-mnist"``: a directory holding any of the four FashionMNIST IDX files
      (``load_fashion_mnist`` then names any missing one);
    - ``"image-folder"``: otherwise, a directory with subdirectories
      (``load_image_folder``);
    - ``"tokens"``: a file ending in ``.npz`` (``load_token_npz``).

    Raises:
      ValueError: ``path`` missing, or none of these, listing the accepted layouts.
    """
    path = Path(path).expanduser()
    if path.is_file():
        if path.suffix.lower() == ".npz":
            return "tokens"
        raise ValueError(f"{path} is a file but not an .npz; the accepted layouts: {_layouts()}.")
    if not path.is_dir():
        raise ValueError(f"{path} does not exist; the accepted layouts: {_layouts()}.")
    with os.scandir(path) as listing:
        entries = {entry.name: entry.is_dir() for entry in listing}
    stems = FASHION_MNIST_FILES.values()
    if any(stem in entries or f"{stem}.gz" in entries for stem in stems):
        return "fashion-mnist"
    if any(entries.values()):
        return "image-folder"
    raise ValueError(
        f"{path} holds neither IDX files nor subdirectories; the accepted layouts: {_layouts()}."
    )


DATASET_NAMES = ("digits", "fashion-mnist", "image-folder", "tokens")
"""What ``load_dataset`` takes by name (``fashion_mnist`` is accepted too)."""


def load_dataset(
    name: str | None = None,
    *,
    data_dir=None,
    dtype="float32",
    image_size: int | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    progress: bool = False,
) -> Dataset:
    """A dataset by name (what the scripts' ``--dataset`` takes) or by what ``data_dir``
    holds (``--data-dir``).

    Args:
      name: ``"digits"``, ``"fashion-mnist"``, ``"image-folder"``, ``"tokens"``; or
        ``None``: the kind ``detect_data_dir(data_dir)`` finds, digits when
        ``data_dir`` is ``None`` too.
      data_dir: the directory (FashionMNIST, image folder) or the ``.npz`` file (tokens);
        ignored by digits.
      dtype: floating dtype of the images (token ids are int64 whatever it says).
      image_size: an image folder's resize (``load_image_folder``); refused elsewhere.
      test_fraction: the share of each class held out by the stratified split of digits,
        of an image folder without ``train/`` and ``val/``, and of a token file without
        a test set (FashionMNIST has its official split).
      seed: that split's seed.
      progress: a progress bar while an image folder is decoded.
    """
    if name is None:
        name = "digits" if data_dir is None else detect_data_dir(data_dir)
    if name == "fashion_mnist":
        name = "fashion-mnist"
    if name not in DATASET_NAMES:
        raise ValueError(
            f"`name` (={name!r}) must be one of {', '.join(map(repr, DATASET_NAMES))}."
        )
    if image_size is not None and name != "image-folder":
        raise ValueError(
            f"`image_size` (={image_size!r}) resizes an image folder's images; the data is {name}."
        )
    if name == "digits":
        return load_digits(test_fraction=test_fraction, seed=seed, dtype=dtype)
    if name == "fashion-mnist":
        return load_fashion_mnist(data_dir, dtype=dtype)
    if data_dir is None:
        raise ValueError(f"`data_dir` is None: {name} reads the user's files; give their path.")
    if name == "image-folder":
        return load_image_folder(
            data_dir,
            image_size=image_size,
            test_fraction=test_fraction,
            seed=seed,
            dtype=dtype,
            progress=progress,
        )
    return load_token_npz(data_dir, test_fraction=test_fraction, seed=seed)


def batch_indices(
    num_examples: int,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    drop_last: bool = False,
) -> list[np.ndarray]:
    """The index arrays of one epoch's batches, in order.

    The order is a permutation drawn from ``np.random.default_rng([seed, epoch])``: a
    pure function of its arguments, identical for both frameworks and regenerable
    after a restart. The last batch is shorter unless ``drop_last``.

    Returns:
      list of int64 arrays, each `(batch_size,)` (the last possibly shorter).
    """
    if int(num_examples) != num_examples or num_examples < 0:
        raise ValueError(f"`num_examples` (={num_examples}) must be a non-negative integer.")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"`batch_size` (={batch_size}) must be a positive integer.")
    if seed < 0 or epoch < 0:
        raise ValueError(f"`seed` (={seed}) and `epoch` (={epoch}) must be non-negative.")
    num_examples, batch_size = int(num_examples), int(batch_size)
    if shuffle:
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(num_examples)
    else:
        order = np.arange(num_examples)
    order = order.astype(np.int64)
    stop = num_examples - num_examples % batch_size if drop_last else num_examples
    return [order[start : start + batch_size] for start in range(0, stop, batch_size)]


def iterate_batches(
    x, y, batch_size: int, *, seed: int, epoch: int, shuffle: bool = True, drop_last: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(x_batch, y_batch)`` in the order of ``batch_indices``.

    Args:
      x: `(n, ...)` array.
      y: `(n, ...)` array with the same leading dimension.
    """
    x, y = np.asarray(x), np.asarray(y)
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"`x` has {x.shape[0]} examples but `y` has {y.shape[0]}; they must match."
        )
    for indices in batch_indices(
        x.shape[0], batch_size, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=drop_last
    ):
        yield x[indices], y[indices]


def digit_tokens(dataset: Dataset) -> Dataset:
    """The 8×8 digits as token sequences: each pixel's intensity 0…16 as an int64 id.

    ``load_digits`` divides the source's integer intensities by 16; this undoes it
    (exactly: k/16 is exact in binary), for ``Embedding`` inputs of shape `(n, 64)`.
    """

    def tokens(x):
        return np.rint(np.asarray(x, np.float64) * 16.0).astype(np.int64)

    return dataclasses.replace(
        dataset, x_train=tokens(dataset.x_train), x_test=tokens(dataset.x_test)
    )
