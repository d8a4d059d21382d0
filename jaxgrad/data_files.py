"""The user's own data, in the layouts the ecosystem already uses (re-exported by
``jaxgrad.data``).

- ``load_image_folder``: torchvision's ``ImageFolder`` directory tree, one
  subdirectory of images per class. The arrays are bit for bit what
  ``ImageFolder(root, transform=Compose([Resize((s, s)), ToTensor()]))`` yields:
  Pillow decodes, ``convert("RGB")``, bilinear resize, ``uint8 / 255`` in float32, NCHW.
- ``load_token_npz``: a ``.npz`` archive of integer token ids and labels for sequence
  classifiers.

Both return the ``Dataset`` of numpy arrays every loader returns; every problem with
the files is a ``ValueError`` naming the file (or key) and what was expected. Pillow
(a dependency of matplotlib) is imported when an image folder is read, tqdm only for
its progress bar.
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from jaxgrad._dataset import Dataset, float_dtype, stratified_split

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""torchvision's ``IMG_EXTENSIONS``: the files an image folder reads (case-insensitive)."""

EVAL_SPLITS = ("val", "test")
"""Beside ``train/``, the directory that holds the test split, in order of preference."""

TOKEN_KEYS = ("tokens", "labels", "test_tokens", "test_labels", "vocab_size", "num_classes")
"""The keys a token ``.npz`` may hold (the first two required)."""


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` (={value!r}) must be a positive integer.")
    return int(value)


def _subdirectories(directory: Path) -> list[str]:
    # torchvision's find_classes: every directory entry (symbolic links followed,
    # hidden ones too), sorted by name
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if entry.is_dir())


def _find_classes(directory: Path) -> list[str]:
    classes = _subdirectories(directory)
    if not classes:
        raise ValueError(
            f"{directory}: no class subdirectory; expected one subdirectory of images per "
            "class (torchvision's ImageFolder layout), e.g. root/cat/1.png, root/dog/2.jpg."
        )
    return classes


def _two_classes(directory: Path, classes: list[str]) -> None:
    """torchvision reads a folder of one class (every label 0); a classifier trained on
    it is right 100 % of the time and learns nothing, so it is refused (issue 55)."""
    if len(classes) == 1:
        raise ValueError(
            f"{directory}: one class subdirectory, {classes[0]!r}; a classifier needs at "
            "least two classes: add one subdirectory of images per class "
            "(torchvision's ImageFolder layout), e.g. root/cat/1.png, root/dog/2.jpg."
        )


def _image_files(directory: Path, classes: list[str]) -> tuple[list[str], np.ndarray]:
    """torchvision's ``make_dataset``: per class in order, every image file below its
    directory (recursively, links followed), walked and named in sorted order."""
    files: list[str] = []
    labels: list[int] = []
    empty = []
    for label, name in enumerate(classes):
        found = [
            os.path.join(walked, file_name)
            for walked, _, file_names in sorted(
                os.walk(os.path.join(directory, name), followlinks=True)
            )
            for file_name in sorted(file_names)
            if file_name.lower().endswith(IMAGE_EXTENSIONS)
        ]
        if not found:
            empty.append(name)
        files += found
        labels += [label] * len(found)
    if empty:
        raise ValueError(
            f"{directory}: no image file in the class director{'y' if len(empty) == 1 else 'ies'} "
            f"{', '.join(map(repr, empty))}; each class needs at least one file ending in "
            f"{', '.join(IMAGE_EXTENSIONS)} (any case)."
        )
    return files, np.asarray(labels, dtype=np.int64)


def _split_directories(root: Path) -> tuple[Path, Path] | None:
    """``(train, test)`` directories when ``root`` holds ``train/`` and ``val/`` or
    ``test/`` whose ``train/`` has subdirectories (classes); ``None`` otherwise (root is
    then one image folder, whose classes may be called "train" and "test")."""
    subdirectories = _subdirectories(root)
    present = [name for name in EVAL_SPLITS if name in subdirectories]
    if "train" not in subdirectories or not present or not _subdirectories(root / "train"):
        return None
    others = [name for name in subdirectories if name not in ("train", *EVAL_SPLITS)]
    if others:
        raise ValueError(
            f"{root}: holds train/ and {present[0]}/ (a train/test split) but also the "
            f"directories {others}; expected either train/ and val/ (or test/) alone, each "
            "with one subdirectory per class, or one subdirectory per class."
        )
    return root / "train", root / present[0]


def _decode(path: str, image_size: int | None, image_module) -> np.ndarray:
    """torchvision's ``default_loader`` then ``Resize((s, s))``: `(H, W, 3)` uint8."""
    try:
        with open(path, "rb") as handle:
            image = image_module.open(handle).convert("RGB")
    except (OSError, SyntaxError, ValueError, image_module.DecompressionBombError) as error:
        raise ValueError(f"{path}: cannot be decoded as an image ({error}).") from error
    if image_size is not None and image.size != (image_size, image_size):
        image = image.resize((image_size, image_size), image_module.Resampling.BILINEAR)
    return np.asarray(image)


def _decode_all(files: list[str], image_size, batch: int, progress: bool) -> np.ndarray:
    """Every file decoded into one `(n, 3, H, W)` uint8 array, ``batch`` files between
    two updates of the progress bar."""
    from PIL import Image

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(files),
            desc="decoding images",
            unit="image",
            leave=False,
            file=sys.stderr,
            dynamic_ncols=True,
        )
    pixels = None
    try:
        for start in range(0, len(files), batch):
            for index in range(start, min(start + batch, len(files))):
                image = _decode(files[index], image_size, Image)
                if pixels is None:
                    height, width = image.shape[:2]
                    pixels = np.empty((len(files), 3, height, width), dtype=np.uint8)
                elif image.shape[:2] != pixels.shape[2:]:
                    (height, width), (other_height, other_width) = pixels.shape[2:], image.shape[:2]
                    raise ValueError(
                        f"images of different sizes: {files[0]} is {width}×{height} and "
                        f"{files[index]} is {other_width}×{other_height} (width×height); pass "
                        "`image_size` to resize every image to image_size × image_size."
                    )
                pixels[index] = image.transpose(2, 0, 1)
            if bar is not None:
                bar.update(min(start + batch, len(files)) - start)
    finally:
        if bar is not None:
            bar.close()
    assert pixels is not None  # at least one file: _image_files refuses empty classes
    return pixels


def load_image_folder(
    root,
    *,
    image_size: int | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    dtype="float32",
    progress: bool = False,
    batch: int = 256,
) -> Dataset:
    """Images in torchvision's ``ImageFolder`` layout, as torchvision reads them.

    ``root/<class>/<file>``: classes are ``root``'s subdirectories sorted by name
    (label = index, torchvision's ``find_classes``); the files are those below each
    class directory, recursively, ending in one of ``IMAGE_EXTENSIONS`` (any case),
    in torchvision's order. Files with other extensions are ignored, as torchvision's
    ``ImageFolder`` ignores them. Each image is decoded by Pillow and converted to RGB
    (``default_loader``: grayscale replicated, alpha dropped), resized to
    ``image_size × image_size`` with Pillow's bilinear filter when given
    (``transforms.Resize((s, s))``), and scaled to ``[0, 1]`` as ``transforms.ToTensor``
    does (``uint8 / 255`` in ``dtype``): the arrays equal torchvision's tensors bit for bit.

    The split: when ``root`` holds ``train/`` and ``val/`` (else ``test/``) that are
    themselves image folders with the same classes, they are the train and test sets
    (with both ``val/`` and ``test/``, ``val/`` is the test set and ``test/`` is left
    alone); otherwise a split of ``root`` stratified by class (``test_fraction``,
    ``seed``).

    Args:
      root: the directory.
      image_size: side of the square every image is resized to; ``None`` keeps the
        sizes, which must then all be equal.
      test_fraction: the share of each class held out, without ``train/`` and ``val/``.
      seed: the split's seed.
      dtype: floating dtype of the images.
      progress: a tqdm bar on stderr while decoding.
      batch: files decoded between two updates of the bar.

    Returns:
      ``Dataset`` with `x_*` of shape `(n, 3, H, W)` (not flattened),
      ``image_shape=(3, H, W)``, ``classes`` the class names, ``name="image-folder"``.

    Raises:
      ValueError: ``root`` missing or not a directory; no class subdirectory, or only
        one (a classifier needs two classes; torchvision would read it); a class
        without images; a file Pillow cannot decode; images of different sizes without
        ``image_size``; ``train/`` and ``val/`` with different classes.
    """
    if image_size is not None:
        image_size = _positive_int("image_size", image_size)
    batch = _positive_int("batch", batch)
    dtype = float_dtype(dtype)
    root = Path(root).expanduser()
    if not root.is_dir():
        state = "is not a directory" if root.exists() else "does not exist"
        raise ValueError(
            f"`root` ({root}) {state}; expected a directory with one subdirectory of "
            "images per class (torchvision's ImageFolder layout)."
        )
    split = _split_directories(root)
    if split is None:
        classes = _find_classes(root)
        files, labels = _image_files(root, classes)
        train, test = stratified_split(labels, test_fraction, seed)
        _two_classes(root, classes)
    else:
        train_dir, test_dir = split
        classes, test_classes = _find_classes(train_dir), _find_classes(test_dir)
        if classes != test_classes:
            raise ValueError(
                f"{train_dir} and {test_dir} must have the same class subdirectories: "
                f"{train_dir.name}/ has {classes}, {test_dir.name}/ has {test_classes} "
                f"(only in {train_dir.name}/: {sorted(set(classes) - set(test_classes))}; "
                f"only in {test_dir.name}/: {sorted(set(test_classes) - set(classes))})."
            )
        _two_classes(train_dir, classes)
        train_files, train_labels = _image_files(train_dir, classes)
        test_files, test_labels = _image_files(test_dir, classes)
        files, labels = train_files + test_files, np.concatenate([train_labels, test_labels])
        train = np.arange(len(train_files))
        test = np.arange(len(train_files), len(files))
    pixels = _decode_all(files, image_size, batch, progress)
    scale = dtype.type(255)
    return Dataset(
        pixels[train].astype(dtype) / scale,
        labels[train],
        pixels[test].astype(dtype) / scale,
        labels[test],
        num_classes=len(classes),
        name="image-folder",
        image_shape=tuple(int(d) for d in pixels.shape[1:]),
        classes=tuple(classes),
    )


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(f"{path}: not a readable .npz archive ({error}).") from error
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{path}: holds a single array; expected an .npz archive (np.savez) with the keys "
            "`tokens` and `labels`."
        )
    arrays = {}
    with archive:
        for key in archive.files:
            try:
                arrays[key] = archive[key]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
                raise ValueError(f"{path}: `{key}` cannot be read ({error}).") from error
    return arrays


def _integers(path: Path, key: str, array: np.ndarray, shape: str, ndim: int) -> np.ndarray:
    if array.dtype.kind not in "iu":
        raise ValueError(
            f"{path}: `{key}` has dtype {array.dtype}; expected an integer array {shape}."
        )
    if array.ndim != ndim:
        raise ValueError(f"{path}: `{key}` has shape {array.shape}; expected {shape}.")
    if array.size and array.min() < 0:
        raise ValueError(f"{path}: `{key}` holds {array.min()}; expected values >= 0.")
    if array.size and array.max() >= np.iinfo(np.int64).max:
        raise ValueError(f"{path}: `{key}` holds {array.max()}, beyond int64.")
    return array.astype(np.int64)


def _scalar(path: Path, key: str, array: np.ndarray) -> int:
    if array.dtype.kind not in "iu" or array.ndim != 0 or array < 1:
        raise ValueError(
            f"{path}: `{key}` is {array!r}; expected one positive integer (a 0-d integer array)."
        )
    return int(array)


def load_token_npz(path, *, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Token sequences for a sequence classifier, from one ``.npz`` archive.

    Keys (``np.savez(path, tokens=..., labels=...)``):

    - ``tokens``: `(n, length)` integer token ids, ``>= 0`` (required);
    - ``labels``: `(n,)` integer classes, ``>= 0`` (required);
    - ``test_tokens`` `(n_test, length)` and ``test_labels`` `(n_test,)`: the test
      set, both or neither (neither: a split of ``tokens`` stratified by class, from
      ``test_fraction`` and ``seed``);
    - ``vocab_size``: 0-d integer, every id below it (default: the largest id + 1);
    - ``num_classes``: 0-d integer, every label below it (default: the largest label + 1).

    Any other key is refused (a misspelt ``test_label`` would otherwise be ignored).

    Returns:
      ``Dataset`` with `x_*` int64 `(n, length)`, `y_*` int64, ``vocab_size`` set,
      ``image_shape=(length,)``, ``name="tokens"``.

    Raises:
      ValueError: the file missing or not an ``.npz``; a key missing, unknown, of a
        non-integer dtype or of the wrong rank; counts or lengths that differ; a
        negative id or label; an id ``>= vocab_size`` or a label ``>= num_classes``.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        state = "is not a file" if path.exists() else "does not exist"
        raise ValueError(
            f"`path` ({path}) {state}; expected an .npz archive with `tokens` (n, length) "
            "and `labels` (n,) integer arrays."
        )
    arrays = _load_npz(path)
    unknown = sorted(set(arrays) - set(TOKEN_KEYS))
    if unknown:
        raise ValueError(
            f"{path}: unexpected key(s) {unknown}; the accepted keys are {', '.join(TOKEN_KEYS)}."
        )
    for key in ("tokens", "labels"):
        if key not in arrays:
            raise ValueError(
                f"{path}: no `{key}` array; expected `tokens` (n, length) integer ids and "
                "`labels` (n,) integer classes."
            )
    if ("test_tokens" in arrays) != ("test_labels" in arrays):
        given, missing = (
            ("test_tokens", "test_labels")
            if "test_tokens" in arrays
            else ("test_labels", "test_tokens")
        )
        raise ValueError(
            f"{path}: `{given}` without `{missing}`; give both or neither (neither: a "
            "stratified split of `tokens`)."
        )
    sets = [("tokens", "labels")] + (
        [("test_tokens", "test_labels")] if "test_tokens" in arrays else []
    )
    checked = {}
    for tokens_key, labels_key in sets:
        tokens = _integers(path, tokens_key, arrays[tokens_key], "(n, length)", 2)
        labels = _integers(path, labels_key, arrays[labels_key], "(n,)", 1)
        if len(tokens) == 0 or tokens.shape[1] == 0:
            raise ValueError(
                f"{path}: `{tokens_key}` has shape {tokens.shape}; expected at least one "
                "sequence of at least one token."
            )
        if len(labels) != len(tokens):
            raise ValueError(
                f"{path}: `{labels_key}` holds {len(labels)} labels but `{tokens_key}` holds "
                f"{len(tokens)} sequences; expected one label per sequence."
            )
        checked[tokens_key], checked[labels_key] = tokens, labels
    length = checked["tokens"].shape[1]
    if "test_tokens" in checked and checked["test_tokens"].shape[1] != length:
        raise ValueError(
            f"{path}: `test_tokens` has shape {checked['test_tokens'].shape}; expected "
            f"sequences of the length of `tokens` ({length})."
        )
    largest_id = max(int(checked[key].max()) for key, _ in sets)
    largest_label = max(int(checked[key].max()) for _, key in sets)
    vocab_size = largest_id + 1
    if "vocab_size" in arrays:
        vocab_size = _scalar(path, "vocab_size", arrays["vocab_size"])
        for key, _ in sets:
            if checked[key].max() >= vocab_size:
                raise ValueError(
                    f"{path}: `{key}` holds the id {checked[key].max()}; expected ids in "
                    f"[0, vocab_size) = [0, {vocab_size})."
                )
    num_classes = largest_label + 1
    if "num_classes" in arrays:
        num_classes = _scalar(path, "num_classes", arrays["num_classes"])
        for _, key in sets:
            if checked[key].max() >= num_classes:
                raise ValueError(
                    f"{path}: `{key}` holds the label {checked[key].max()}; expected labels in "
                    f"[0, num_classes) = [0, {num_classes})."
                )
    if "test_tokens" in checked:
        x_train, y_train = checked["tokens"], checked["labels"]
        x_test, y_test = checked["test_tokens"], checked["test_labels"]
    else:
        train, test = stratified_split(checked["labels"], test_fraction, seed)
        x_train, y_train = checked["tokens"][train], checked["labels"][train]
        x_test, y_test = checked["tokens"][test], checked["labels"][test]
    return Dataset(
        x_train,
        y_train,
        x_test,
        y_test,
        num_classes=num_classes,
        name="tokens",
        image_shape=(int(length),),
        vocab_size=vocab_size,
    )
