"""jaxgrad.data_files: the user's own images (torchvision's ImageFolder layout) and
token sequences (.npz), and ``jaxgrad.data``'s choice between the layouts.

The images are written here with Pillow in every mode a folder meets (RGB, grayscale,
RGBA, palette, CMYK JPEG), as PNG, JPEG, BMP and TIFF; the expected arrays are
torchvision's own: ``ImageFolder(root, transform=Compose([Resize((s, s)), ToTensor()]))``,
compared bit for bit (``np.array_equal``), classes and labels first. torch runs on one
thread (conftest.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from jaxgrad import data
from jaxgrad.data_files import IMAGE_EXTENSIONS
from parity_tests._zoo_extra import skip_unless_installed

# (mode, extension) of the files of each class, in order: every conversion to RGB that
# torchvision's default_loader meets, in each format
KINDS = [
    ("RGB", ".png"),
    ("L", ".png"),
    ("RGBA", ".png"),
    ("P", ".png"),
    ("RGB", ".jpg"),
    ("L", ".JPEG"),
    ("CMYK", ".jpg"),
    ("RGB", ".bmp"),
    ("LA", ".tif"),
]


def _torchvision():
    skip_unless_installed("torchvision")
    from jaxgrad.zoo_imports import import_torchvision

    return import_torchvision()


def write_image(path, rng, mode, size):
    """A random image of ``size`` (width, height) in ``mode``, saved by its extension."""
    width, height = size
    pixels = rng.integers(0, 256, (height, width, 4), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGBA")
    if mode == "P":
        image = image.convert("RGB").quantize(16)
    elif mode != "RGBA":
        image = image.convert(mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path


def write_folder(root, rng, classes=("dog", "cat", "bird"), *, size=(10, 8), sizes=None):
    """One directory per class, one file per entry of ``KINDS`` (the first in a nested
    folder, as torchvision walks recursively), and a text file torchvision ignores."""
    for index, name in enumerate(classes):
        for number, (mode, extension) in enumerate(KINDS):
            folder = root / name / ("nested" if number == 0 else "")
            shape = sizes[(index + number) % len(sizes)] if sizes else size
            write_image(folder / f"{number}{extension}", rng, mode, shape)
        (root / name / "notes.txt").write_text("not an image")
    return root


def torchvision_arrays(root, image_size=None):
    """``(class_to_idx, images (n, 3, H, W) float32, labels (n,))`` as ImageFolder gives them."""
    torchvision = _torchvision()
    transforms = torchvision.transforms
    steps = [transforms.Resize((image_size, image_size))] if image_size else []
    folder = torchvision.datasets.ImageFolder(
        str(root), transform=transforms.Compose([*steps, transforms.ToTensor()])
    )
    images = np.stack([folder[i][0].numpy() for i in range(len(folder))])
    return folder.class_to_idx, images, np.asarray(folder.targets, dtype=np.int64)


def assert_equals_torchvision(dataset, root, image_size, indices):
    class_to_idx, images, labels = torchvision_arrays(root, image_size)
    assert dict(zip(dataset.classes, range(dataset.num_classes))) == class_to_idx
    train, test = indices
    for x, y, part in (
        (dataset.x_train, dataset.y_train, train),
        (dataset.x_test, dataset.y_test, test),
    ):
        assert x.dtype == np.float32 and y.dtype == np.int64
        assert x.shape == images[part].shape
        np.testing.assert_array_equal(y, labels[part])
        assert np.array_equal(x, images[part])  # bit for bit


def test_an_image_folder_is_torchvisions_imagefolder_bit_for_bit(tmp_path, seed):
    root = write_folder(tmp_path, np.random.default_rng(seed))
    dataset = data.load_image_folder(root)
    assert dataset.classes == ("bird", "cat", "dog") and dataset.num_classes == 3
    assert dataset.name == "image-folder" and dataset.image_shape == (3, 8, 10)
    assert dataset.x_train.shape[1:] == (3, 8, 10) and dataset.num_features == 240
    assert len(dataset.x_train) + len(dataset.x_test) == 3 * len(KINDS)
    labels = torchvision_arrays(root)[2]
    assert_equals_torchvision(dataset, root, None, data.stratified_split(labels, 0.2, 0))


@pytest.mark.parametrize("image_size", [6, 13])  # down and up
def test_resized_images_are_torchvisions_resize_then_to_tensor(tmp_path, seed, image_size):
    sizes = [(10, 8), (7, 12), (13, 13), (31, 5)]
    root = write_folder(tmp_path, np.random.default_rng(seed), ("a", "b"), sizes=sizes)
    dataset = data.load_image_folder(root, image_size=image_size, test_fraction=0.3, seed=4)
    assert dataset.image_shape == (3, image_size, image_size)
    labels = np.repeat([0, 1], len(KINDS))  # classes a, b in order
    assert_equals_torchvision(dataset, root, image_size, data.stratified_split(labels, 0.3, 4))


@pytest.mark.parametrize("held_out", ["val", "test"])
def test_train_and_val_directories_are_the_split(tmp_path, seed, held_out):
    rng = np.random.default_rng(seed)
    write_folder(tmp_path / "train", rng, ("x", "y"))
    write_folder(tmp_path / held_out, rng, ("x", "y"))
    dataset = data.load_image_folder(tmp_path, test_fraction=0.5)  # unused: the directories split
    everything = np.arange(2 * len(KINDS))
    assert_equals_torchvision(
        dataclass_part(dataset, "train"), tmp_path / "train", None, (everything, everything[:0])
    )
    assert_equals_torchvision(
        dataclass_part(dataset, "test"), tmp_path / held_out, None, (everything, everything[:0])
    )


def dataclass_part(dataset, part):
    """``dataset`` with its ``part`` split as the training set (and no test set)."""
    x, y = getattr(dataset, f"x_{part}"), getattr(dataset, f"y_{part}")
    return dataclasses.replace(dataset, x_train=x, y_train=y, x_test=x[:0], y_test=y[:0])


def test_with_val_and_test_val_is_the_test_set(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for split, count in (("train", 3), ("val", 2), ("test", 1)):
        for name in ("p", "q"):
            for number in range(count):
                write_image(tmp_path / split / name / f"{number}.png", rng, "RGB", (4, 4))
    dataset = data.load_image_folder(tmp_path)
    assert (len(dataset.x_train), len(dataset.x_test)) == (6, 4)
    assert dataset.classes == ("p", "q")


def test_classes_named_train_and_test_holding_images_are_classes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for name in ("test", "train"):
        for number in range(5):
            write_image(tmp_path / name / f"{number}.png", rng, "RGB", (4, 4))
    dataset = data.load_image_folder(tmp_path)
    assert dataset.classes == ("test", "train") and len(dataset.x_train) == 8


def test_the_split_is_stratified_deterministic_disjoint_and_complete(tmp_path, seed):
    rng = np.random.default_rng(seed)
    counts = {"a": 10, "b": 5, "c": 7}
    for name, count in counts.items():
        for number in range(count):
            write_image(tmp_path / name / f"{number:02d}.png", rng, "RGB", (5, 3))
    first = data.load_image_folder(tmp_path, test_fraction=0.2, seed=3)
    again = data.load_image_folder(tmp_path, test_fraction=0.2, seed=3, batch=4)
    other = data.load_image_folder(tmp_path, test_fraction=0.2, seed=4)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.x_test, other.x_test)
    # each class holds round(0.2 · size) out
    assert np.bincount(first.y_test).tolist() == [2, 1, 1]
    # every image exactly once across the two sets (random images are distinct)
    rows = np.concatenate([first.x_train, first.x_test]).reshape(22, -1)
    assert len(np.unique(rows, axis=0)) == 22
    expected = np.stack(
        [
            np.asarray(Image.open(path).convert("RGB")).transpose(2, 0, 1)
            for path in sorted(tmp_path.rglob("*.png"))
        ]
    ).reshape(22, -1).astype(np.float32) / np.float32(255)
    assert np.array_equal(np.unique(rows, axis=0), np.unique(expected, axis=0))


def test_float64_is_to_tensor_under_a_float64_default(tmp_path, seed):
    import torch

    root = write_folder(tmp_path, np.random.default_rng(seed), ("a", "b"))
    dataset = data.load_image_folder(root, dtype="float64", test_fraction=0.5)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        _, images, labels = torchvision_arrays(root)
    finally:
        torch.set_default_dtype(previous)
    train, test = data.stratified_split(labels, 0.5, 0)
    assert dataset.x_train.dtype == np.float64 and images.dtype == np.float64
    assert np.array_equal(dataset.x_train, images[train])
    assert np.array_equal(dataset.x_test, images[test])


def test_the_progress_bar_goes_to_stderr(tmp_path, seed, capsys):
    root = write_folder(tmp_path, np.random.default_rng(seed), ("a", "b"))
    quiet = data.load_image_folder(root)
    assert capsys.readouterr().err == ""
    shown = data.load_image_folder(root, progress=True, batch=5)
    assert "decoding images" in capsys.readouterr().err
    assert np.array_equal(quiet.x_train, shown.x_train)


def test_one_rule_gives_the_nchw_view_of_every_image_set(tmp_path, seed):
    root = write_folder(tmp_path, np.random.default_rng(seed), ("a", "b"))
    folder = data.load_image_folder(root)
    digits = data.load_digits()
    for dataset, channels in ((folder, 3), (digits, 1)):
        x = dataset.x_train
        view = x.reshape(len(x), -1, *dataset.image_shape[-2:])
        assert view.shape == (len(x), channels, *dataset.image_shape[-2:])
        assert x.reshape(len(x), -1).shape == (len(x), dataset.num_features)
    assert np.shares_memory(folder.x_train.reshape(len(folder.x_train), -1, 8, 10), folder.x_train)


def test_a_dataset_is_still_built_from_its_seven_fields():
    x, y = np.zeros((2, 4), np.float32), np.zeros(2, np.int64)
    dataset = data.Dataset(x, y, x, y, num_classes=2, name="custom", image_shape=(2, 2))
    assert dataset.vocab_size is None and dataset.classes == () and dataset.num_features == 4


# ------------------------------------------------------------------ image folder errors
def test_a_missing_root_or_a_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"`root` \(.*nowhere\) does not exist; expected a dir"):
        data.load_image_folder(tmp_path / "nowhere")
    (tmp_path / "file.png").write_bytes(b"")
    with pytest.raises(ValueError, match=r"file\.png\) is not a directory; .*ImageFolder"):
        data.load_image_folder(tmp_path / "file.png")


def test_a_root_without_class_directories_is_refused(tmp_path, seed):
    write_image(tmp_path / "lonely.png", np.random.default_rng(seed), "RGB", (3, 3))
    with pytest.raises(ValueError, match=r"no class subdirectory; expected one subdirectory"):
        data.load_image_folder(tmp_path)


def test_a_class_without_images_is_named(tmp_path, seed):
    write_image(tmp_path / "full" / "0.png", np.random.default_rng(seed), "RGB", (3, 3))
    (tmp_path / "empty").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "readme.txt").write_text("no image here")
    message = r"no image file in the class directories 'empty', 'texts'; .* \.jpg, \.jpeg, \.png"
    with pytest.raises(ValueError, match=message):
        data.load_image_folder(tmp_path)


def test_a_corrupt_file_is_named(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for number in range(3):
        write_image(tmp_path / "a" / f"{number}.png", rng, "RGB", (3, 3))
    (tmp_path / "a" / "1.png").write_bytes(b"not a png at all")
    good = write_image(tmp_path / "b" / "0.jpg", rng, "RGB", (3, 3))
    truncated = good.read_bytes()[:40]
    with pytest.raises(ValueError, match=r"a/1\.png: cannot be decoded as an image"):
        data.load_image_folder(tmp_path)
    write_image(tmp_path / "a" / "1.png", rng, "RGB", (3, 3))
    good.write_bytes(truncated)
    with pytest.raises(ValueError, match=r"b/0\.jpg: cannot be decoded as an image"):
        data.load_image_folder(tmp_path)


def test_images_of_different_sizes_need_image_size(tmp_path, seed):
    rng = np.random.default_rng(seed)
    write_image(tmp_path / "a" / "0.png", rng, "RGB", (4, 3))
    write_image(tmp_path / "a" / "1.png", rng, "RGB", (4, 3))
    write_image(tmp_path / "b" / "0.png", rng, "L", (5, 3))
    message = r"a/0\.png is 4×3 and .*b/0\.png is 5×3 \(width×height\); pass `image_size`"
    with pytest.raises(ValueError, match=message):
        data.load_image_folder(tmp_path)
    assert data.load_image_folder(tmp_path, image_size=4).image_shape == (3, 4, 4)


def test_train_and_val_must_have_the_same_classes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for split, names in (("train", ("a", "b")), ("val", ("a", "c"))):
        for name in names:
            write_image(tmp_path / split / name / "0.png", rng, "RGB", (3, 3))
    message = r"same class subdirectories: .*only in train/: \['b'\]; only in val/: \['c'\]"
    with pytest.raises(ValueError, match=message):
        data.load_image_folder(tmp_path)


def test_other_directories_beside_train_and_val_are_refused(tmp_path, seed):
    rng = np.random.default_rng(seed)
    for split in ("train", "val", "extra"):
        write_image(tmp_path / split / "a" / "0.png", rng, "RGB", (3, 3))
    with pytest.raises(
        ValueError, match=r"holds train/ and val/ .* also the directories \['extra'\]"
    ):
        data.load_image_folder(tmp_path)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"image_size": 0}, r"`image_size` \(=0\) must be a positive integer"),
        ({"image_size": 2.5}, r"`image_size` \(=2\.5\) must be a positive integer"),
        ({"batch": 0}, r"`batch` \(=0\) must be a positive integer"),
        ({"dtype": "int32"}, r"`dtype` \(='int32'\) must be a floating dtype"),
        ({"test_fraction": 1.0}, r"`test_fraction` \(=1\.0\) must lie strictly between"),
    ],
)
def test_bad_arguments_are_named(tmp_path, seed, kwargs, message):
    write_image(tmp_path / "a" / "0.png", np.random.default_rng(seed), "RGB", (3, 3))
    with pytest.raises(ValueError, match=message):
        data.load_image_folder(tmp_path, **kwargs)


def test_the_extensions_are_torchvisions():
    torchvision = _torchvision()
    assert IMAGE_EXTENSIONS == torchvision.datasets.folder.IMG_EXTENSIONS


# ------------------------------------------------------------------ token files
def token_arrays(rng, n=20, length=6, vocab=11, classes=3):
    return {
        "tokens": rng.integers(0, vocab, (n, length)),
        "labels": np.arange(n) % classes,
    }


def test_a_token_file_with_its_test_set(tmp_path, seed):
    rng = np.random.default_rng(seed)
    arrays = token_arrays(rng)
    path = tmp_path / "seq.npz"
    np.savez(
        path,
        tokens=arrays["tokens"].astype(np.int32),
        labels=arrays["labels"].astype(np.uint8),
        test_tokens=np.array([[1, 2, 3, 4, 5, 6]], np.int16),
        test_labels=np.array([2]),
        vocab_size=np.array(50),
        num_classes=np.array(4),
    )
    dataset = data.load_token_npz(path)
    assert dataset.x_train.dtype == np.int64 and dataset.y_train.dtype == np.int64
    assert dataset.x_test.dtype == np.int64 and dataset.y_test.dtype == np.int64
    np.testing.assert_array_equal(dataset.x_train, arrays["tokens"])
    np.testing.assert_array_equal(dataset.y_train, arrays["labels"])
    np.testing.assert_array_equal(dataset.x_test, [[1, 2, 3, 4, 5, 6]])
    assert (dataset.vocab_size, dataset.num_classes, dataset.name) == (50, 4, "tokens")
    assert dataset.image_shape == (6,) and dataset.num_features == 6


def test_a_token_file_without_a_test_set_is_split_by_class(tmp_path, seed):
    arrays = token_arrays(np.random.default_rng(seed))
    path = tmp_path / "seq.npz"
    np.savez(path, **arrays)
    dataset = data.load_token_npz(path, test_fraction=0.25, seed=7)
    train, test = data.stratified_split(arrays["labels"], 0.25, 7)
    np.testing.assert_array_equal(dataset.x_train, arrays["tokens"][train])
    np.testing.assert_array_equal(dataset.x_test, arrays["tokens"][test])
    np.testing.assert_array_equal(dataset.y_test, arrays["labels"][test])
    assert dataset.vocab_size == int(arrays["tokens"].max()) + 1 and dataset.num_classes == 3
    again = data.load_token_npz(path, test_fraction=0.25, seed=7)
    assert np.array_equal(again.x_test, dataset.x_test)


def _bad(**changes):
    """token_arrays with ``changes`` (a value ``None`` removes the key)."""
    arrays = token_arrays(np.random.default_rng(0), vocab=10)
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    return arrays


@pytest.mark.parametrize(
    "arrays, message",
    [
        (_bad(tokens=None), r"no `tokens` array; expected `tokens` \(n, length\) integer ids"),
        (_bad(labels=None), r"no `labels` array; expected .* `labels` \(n,\) integer classes"),
        (_bad(test_label=np.zeros(2)), r"unexpected key\(s\) \['test_label'\]; the accepted keys"),
        (_bad(tokens=np.zeros((20, 6))), r"`tokens` has dtype float64; expected an integer array"),
        (_bad(tokens=np.ones((20, 6), bool)), r"`tokens` has dtype bool; expected an integer"),
        (_bad(tokens=np.zeros(20, int)), r"`tokens` has shape \(20,\); expected \(n, length\)"),
        (_bad(tokens=np.zeros((0, 6), int), labels=np.zeros(0, int)), r"expected at least one"),
        (_bad(labels=np.zeros((20, 1), int)), r"`labels` has shape \(20, 1\); expected \(n,\)"),
        (_bad(labels=np.arange(20) * 0.5), r"`labels` has dtype float64; expected an integer"),
        (_bad(labels=np.zeros(19, int)), r"`labels` holds 19 labels but `tokens` holds 20"),
        (_bad(tokens=-np.ones((20, 6), int)), r"`tokens` holds -1; expected values >= 0"),
        (_bad(labels=np.arange(20) - 1), r"`labels` holds -1; expected values >= 0"),
        (
            _bad(vocab_size=np.array(5)),
            r"`tokens` holds the id \d+; expected ids in \[0, vocab_size\) = \[0, 5\)",
        ),
        (_bad(vocab_size=np.array([10])), r"`vocab_size` is .*; expected one positive integer"),
        (_bad(vocab_size=np.array(10.0)), r"`vocab_size` is .*; expected one positive integer"),
        (
            _bad(num_classes=np.array(2)),
            r"`labels` holds the label 2; expected labels in \[0, num_classes\) = \[0, 2\)",
        ),
        (_bad(num_classes=np.array(0)), r"`num_classes` is .*; expected one positive integer"),
        (_bad(test_tokens=np.zeros((2, 6), int)), r"`test_tokens` without `test_labels`"),
        (_bad(test_labels=np.zeros(2, int)), r"`test_labels` without `test_tokens`"),
        (
            _bad(test_tokens=np.zeros((2, 5), int), test_labels=np.zeros(2, int)),
            r"`test_tokens` has shape \(2, 5\); expected sequences of the length of `tokens` \(6\)",
        ),
        (
            _bad(test_tokens=np.zeros((2, 6), int), test_labels=np.zeros(3, int)),
            r"`test_labels` holds 3 labels but `test_tokens` holds 2",
        ),
        (
            _bad(
                test_tokens=np.full((2, 6), 12),
                test_labels=np.zeros(2, int),
                vocab_size=np.array(10),
            ),
            r"`test_tokens` holds the id 12; expected ids in \[0, vocab_size\) = \[0, 10\)",
        ),
        (
            _bad(test_tokens=np.zeros((2, 6), int), test_labels=np.array([0, -3])),
            r"`test_labels` holds -3; expected values >= 0",
        ),
    ],
)
def test_each_invalid_token_file_is_refused_naming_the_key(tmp_path, arrays, message):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message):
        data.load_token_npz(path)


def test_what_is_not_an_npz_archive_is_refused(tmp_path):
    with pytest.raises(
        ValueError, match=r"`path` \(.*none\.npz\) does not exist; expected an .npz"
    ):
        data.load_token_npz(tmp_path / "none.npz")
    with pytest.raises(ValueError, match=r"is not a file; expected an .npz archive"):
        data.load_token_npz(tmp_path)
    np.save(tmp_path / "single.npy", np.zeros((2, 3), int))
    with pytest.raises(ValueError, match=r"single\.npy: holds a single array; expected an .npz"):
        data.load_token_npz(tmp_path / "single.npy")
    (tmp_path / "garbage.npz").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(ValueError, match=r"garbage\.npz: not a readable .npz archive"):
        data.load_token_npz(tmp_path / "garbage.npz")
    np.savez(tmp_path / "objects.npz", tokens=np.array([[1], "a"], dtype=object), labels=[0, 1])
    with pytest.raises(ValueError, match=r"objects\.npz: `tokens` cannot be read"):
        data.load_token_npz(tmp_path / "objects.npz")


# ------------------------------------------------------------------ which layout
def _layouts(tmp_path, seed):
    from parity_tests.test_data import write_fashion

    rng = np.random.default_rng(seed)
    paths = {}
    paths["idx"] = tmp_path / "idx"
    paths["idx"].mkdir()
    write_fashion(paths["idx"], rng)
    paths["idx.gz"] = tmp_path / "idx_gz"
    paths["idx.gz"].mkdir()
    write_fashion(paths["idx.gz"], rng, gz=True)
    paths["folder"] = tmp_path / "folder"
    for name in ("a", "b"):
        for number in range(5):
            write_image(paths["folder"] / name / f"{number}.png", rng, "RGB", (4, 4))
    paths["split"] = tmp_path / "split"
    for split in ("train", "val"):
        for name in ("a", "b"):
            write_image(paths["split"] / split / name / "0.jpg", rng, "RGB", (4, 4))
    paths["npz"] = tmp_path / "tokens.NPZ"
    with open(paths["npz"], "wb") as handle:
        np.savez(handle, **token_arrays(rng))
    return paths


def test_detect_data_dir_tells_each_layout(tmp_path, seed):
    paths = _layouts(tmp_path, seed)
    kinds = {name: data.detect_data_dir(path) for name, path in paths.items()}
    assert kinds == {
        "idx": "fashion-mnist",
        "idx.gz": "fashion-mnist",
        "folder": "image-folder",
        "split": "image-folder",
        "npz": "tokens",
    }


def test_load_dataset_loads_what_the_directory_holds(tmp_path, seed):
    paths = _layouts(tmp_path, seed)
    fashion = data.load_dataset(data_dir=paths["idx"])
    assert fashion.name == "fashion-mnist" and fashion.x_train.shape == (5, 784)
    by_name = data.load_dataset("fashion-mnist", data_dir=paths["idx"])
    assert np.array_equal(by_name.x_train, fashion.x_train)
    folder = data.load_dataset(data_dir=paths["folder"], image_size=2, test_fraction=0.4)
    assert folder.x_train.shape == (6, 3, 2, 2) and folder.x_test.shape == (4, 3, 2, 2)
    split = data.load_dataset(data_dir=paths["split"], dtype="float64")
    assert split.x_train.shape == (2, 3, 4, 4) and split.x_train.dtype == np.float64
    tokens = data.load_dataset(data_dir=paths["npz"], seed=1)
    assert tokens.name == "tokens" and tokens.x_train.dtype == np.int64
    assert data.load_dataset().name == "digits"


def test_what_no_loader_reads_is_refused_listing_the_layouts(tmp_path):
    layouts = r"the accepted layouts: \(1\) .*IDX.* \(2\) an image folder.* \(3\) a \.npz file"
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(
        ValueError, match=r"empty holds neither IDX files nor subdirectories; " + layouts
    ):
        data.detect_data_dir(tmp_path / "empty")
    with pytest.raises(ValueError, match=r"notes\.txt is a file but not an \.npz; " + layouts):
        data.detect_data_dir(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match=r"missing does not exist; " + layouts):
        data.load_dataset(data_dir=tmp_path / "missing")


def test_load_dataset_refuses_what_does_not_apply(tmp_path, seed):
    paths = _layouts(tmp_path, seed)
    with pytest.raises(
        ValueError, match=r"`image_size` \(=8\) resizes an image folder's .*fashion-mnist"
    ):
        data.load_dataset(data_dir=paths["idx"], image_size=8)
    with pytest.raises(ValueError, match=r"`name` \(='cifar'\) must be one of 'digits', "):
        data.load_dataset("cifar")
    with pytest.raises(ValueError, match=r"`data_dir` is None: tokens reads the user's files"):
        data.load_dataset("tokens")
    # the IDX path keeps its own messages
    (paths["idx"] / "t10k-images-idx3-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"FashionMNIST file 't10k-images-idx3-ubyte'"):
        data.load_dataset(data_dir=paths["idx"])
