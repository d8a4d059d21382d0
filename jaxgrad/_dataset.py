"""The ``Dataset`` every loader returns, and the stratified split they share.

Below both ``jaxgrad.data`` (the built-in sets, the dispatch by name or by layout) and
``jaxgrad.data_files`` (the user's own files), which both build it; users import it
from ``jaxgrad.data``.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A train/test split as numpy arrays: images, or token sequences.

    The layout of the `x` arrays depends on the source, and one rule covers them all:
    ``x.reshape(len(x), -1)`` is always the flat `(n, num_features)` view (the MLP's
    input), and for images ``x.reshape(len(x), -1, *image_shape[-2:])`` is always the
    NCHW view `(n, C, H, W)` (the CNN's input, C, H, W as torch).

    - the built-in grayscale sets (digits, FashionMNIST): flattened `(n, H·W)` floats
      in ``[0, 1]``, ``image_shape=(H, W)``;
    - an image folder (``load_image_folder``): already `(n, C, H, W)` floats in
      ``[0, 1]``, *not* flattened, ``image_shape=(C, H, W)`` (C = 3, RGB);
    - token sequences (``load_token_npz``, ``digit_tokens``): int64 ids `(n, length)`,
      with ``vocab_size`` set for a token file.

    Attributes:
      x_train: `(n_train, ...)` as above.
      y_train: `(n_train,)` int64 class labels in ``[0, num_classes)``.
      x_test: `(n_test, ...)`, laid out as `x_train`.
      y_test: `(n_test,)` int64.
      num_classes: number of classes.
      name: ``"digits"``, ``"fashion-mnist"``, ``"image-folder"`` or ``"tokens"``.
      image_shape: the shape of one example unflattened: ``(8, 8)`` for digits,
        `(3, H, W)` for an image folder, `(length,)` for a token file.
      vocab_size: the number of token ids (ids lie in ``[0, vocab_size)``) for a token
        file; ``None`` otherwise.
      classes: the class names, index = label (an image folder's sorted directory
        names, torchvision's ``ImageFolder.classes``); ``()`` where the source has none.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    name: str
    image_shape: tuple
    vocab_size: int | None = None
    classes: tuple = ()

    @property
    def num_features(self) -> int:
        """The size of one example flattened: ``prod(x_train.shape[1:])``."""
        return int(np.prod(self.x_train.shape[1:], dtype=np.int64))


def float_dtype(dtype) -> np.dtype:
    """``dtype`` as a numpy floating dtype, or a ``TypeError``/``ValueError`` naming it."""
    try:
        result = np.dtype(dtype)
    except TypeError as error:
        raise TypeError(f"`dtype` (={dtype!r}) is not a numpy dtype.") from error
    if result.kind != "f":
        raise ValueError(f"`dtype` (={dtype!r}) must be a floating dtype such as 'float32'.")
    return result


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int):
    """Indices ``(train, test)``: within each class a seeded permutation, the first
    ``round(test_fraction * class_size)`` of it to test; both sorted ascending."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"`test_fraction` (={test_fraction}) must lie strictly between 0 and 1.")
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(len(members))]
        n_test = int(round(test_fraction * len(members)))
        test.append(members[:n_test])
        train.append(members[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))
