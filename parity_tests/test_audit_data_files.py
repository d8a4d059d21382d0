"""``load_image_folder``'s classes against torchvision's own ``ImageFolder`` (issue 55's
held-out audit): the class list is torchvision's ``find_classes``,
``sorted(entry.name for entry in os.scandir(root) if entry.is_dir())``:

- a plain, case-sensitive ``sorted`` (``"Zebra"`` before ``"ant"``: every label is
  the index in that order, so a case-insensitive sort permutes them all);
- every directory entry, hidden ones (``.cache``) included;
- ``is_dir()`` follows symbolic links, and ``make_dataset`` walks with
  ``followlinks=True``: a linked class directory is a class, a linked folder inside a
  class is read.

Each folder is written here (tiny PNGs); the expected classes, labels and pixels are
torchvision's (``parity_tests.test_data_files.assert_equals_torchvision``: classes and
labels first, then the arrays bit for bit).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from jaxgrad import data
from parity_tests._zoo_extra import requires
from parity_tests.test_data_files import (
    assert_equals_torchvision,
    torchvision_arrays,
    write_image,
)

pytestmark = requires("torchvision")


def _write_class(directory, rng, count=3, size=(4, 3)):
    for number in range(count):
        write_image(directory / f"{number}.png", rng, "RGB", size)


def _assert_is_torchvisions(root, expected_classes):
    class_to_idx, _, labels = torchvision_arrays(root)
    assert list(class_to_idx) == expected_classes  # torchvision's own order, checked
    dataset = data.load_image_folder(root)
    assert dataset.classes == tuple(expected_classes)
    assert_equals_torchvision(dataset, root, None, data.stratified_split(labels, 0.2, 0))


def test_classes_sort_case_sensitively_as_torchvisions_find_classes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for name in ("ant", "Zebra", "bee", "Cat"):
        _write_class(tmp_path / name, rng)
    # plain sorted(): upper case first ("C" < "Z" < "a"); by str.lower every label moves
    _assert_is_torchvisions(tmp_path, ["Cat", "Zebra", "ant", "bee"])


def test_hidden_class_directories_are_classes_as_in_torchvision(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for name in ("dog", ".cache", "cat"):
        _write_class(tmp_path / name, rng)
    _assert_is_torchvisions(tmp_path, [".cache", "cat", "dog"])


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")
def test_linked_class_directories_and_linked_folders_are_followed_as_in_torchvision(tmp_path, seed):
    rng = np.random.default_rng(seed)
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    for name in ("a", "c"):
        _write_class(root / name, rng)
    _write_class(elsewhere / "b", rng)
    _write_class(elsewhere / "more", rng, count=2)
    os.symlink(elsewhere / "b", root / "b", target_is_directory=True)  # a linked class
    os.symlink(elsewhere / "more", root / "a" / "more", target_is_directory=True)  # inside one
    _assert_is_torchvisions(root, ["a", "b", "c"])
    dataset = data.load_image_folder(root)
    assert len(dataset.y_train) + len(dataset.y_test) == 3 + 2 + 3 + 3
