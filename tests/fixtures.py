"""Test data helpers: tiny, learnable look-alikes of the datasets in their real on-disk formats.

Fashion-MNIST (idx), CIFAR-10/100 (Python 2 pickles), CIFAR-10-C (.npy), DomainNet and
ImageNet val (JPEG class folders), Flowers102 (JPEGs + .mat) and Oxford-IIIT Pet (JPEGs + txt).
And the comparison of two launches of one training run (an uninterrupted and a resumed one, a forked
and a fresh one): records, metric rows, checkpoint weights.
"""

from __future__ import annotations

import csv
import io
import json
import pickle
import struct
from pathlib import Path

import numpy as np
from PIL import Image

FMNIST_SHAPE = (28, 28)
NUM_CLASSES = 10


def _write_idx(path: Path, array: np.ndarray) -> None:
    """Write a uint8 array as an uncompressed idx file (magic 2049/2051, big-endian dims)."""
    magic = 0x0800 | array.ndim  # 0x08 = unsigned byte
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def fake_fashion_mnist(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random labelled 28x28 uint8 images: a fixed per-class template plus noise.

    Classes are separable (each class has its own template of bright squares), so a
    small model can learn them; labels cycle through all classes before being shuffled.
    """
    templates = np.random.default_rng(1234).random((NUM_CLASSES, *FMNIST_SHAPE)) > 0.7
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.uint8)
    noise = rng.integers(0, 80, size=(n, *FMNIST_SHAPE))
    images = np.where(templates[labels], 175, 0) + noise
    return images.astype(np.uint8), labels


def write_fashion_mnist(root: str | Path, n_train: int = 200, n_test: int = 100, seed: int = 0) -> Path:
    """Write tiny Fashion-MNIST idx files under ``root/FashionMNIST/raw/`` (torchvision layout).

    Args:
        root: The data directory to create (the ``data_dir`` to pass to the loaders).
        n_train: Number of training images.
        n_test: Number of test images.
        seed: Seed of the images and labels (train and test use different streams).

    Returns:
        ``root`` as a ``Path``.
    """
    root = Path(root)
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n, offset in (("train", n_train, 0), ("t10k", n_test, 1)):
        images, labels = fake_fashion_mnist(n, seed * 2 + offset)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return root


# ============================================================================ real-format writers
# Tiny look-alikes of the paper's datasets, written in each dataset's real on-disk format so
# the loaders can be tested offline. Images carry a per-class mean colour plus noise (a small
# model can learn them); JPEG sets get varied sizes and aspect ratios.

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# CIFAR-100 superclasses and their five fine classes (the table of the CIFAR page).
_CIFAR100_GROUPS = {
    "aquatic_mammals": "beaver dolphin otter seal whale",
    "fish": "aquarium_fish flatfish ray shark trout",
    "flowers": "orchid poppy rose sunflower tulip",
    "food_containers": "bottle bowl can cup plate",
    "fruit_and_vegetables": "apple mushroom orange pear sweet_pepper",
    "household_electrical_devices": "clock keyboard lamp telephone television",
    "household_furniture": "bed chair couch table wardrobe",
    "insects": "bee beetle butterfly caterpillar cockroach",
    "large_carnivores": "bear leopard lion tiger wolf",
    "large_man-made_outdoor_things": "bridge castle house road skyscraper",
    "large_natural_outdoor_scenes": "cloud forest mountain plain sea",
    "large_omnivores_and_herbivores": "camel cattle chimpanzee elephant kangaroo",
    "medium_mammals": "fox porcupine possum raccoon skunk",
    "non-insect_invertebrates": "crab lobster snail spider worm",
    "people": "baby boy girl man woman",
    "reptiles": "crocodile dinosaur lizard snake turtle",
    "small_mammals": "hamster mouse rabbit shrew squirrel",
    "trees": "maple_tree oak_tree palm_tree pine_tree willow_tree",
    "vehicles_1": "bicycle bus motorcycle pickup_truck train",
    "vehicles_2": "lawn_mower rocket streetcar tank tractor",
}
CIFAR100_COARSE_CLASSES = tuple(_CIFAR100_GROUPS)
CIFAR100_CLASSES = tuple(sorted(name for names in _CIFAR100_GROUPS.values() for name in names.split()))
CIFAR100_COARSE_OF_FINE = np.array(
    [next(i for i, names in enumerate(_CIFAR100_GROUPS.values()) if fine in names.split()) for fine in CIFAR100_CLASSES]
)

# A fixed mean colour per class (shared by every writer; enough for CIFAR-100).
_CLASS_COLOURS = np.random.default_rng(2024).integers(30, 226, size=(len(CIFAR100_CLASSES), 3))
_SIZE_RANGE = (40, 121)  # image heights and widths of the JPEG sets, in pixels (high exclusive)
CIFAR_C_SEVERITIES = 5


def _balanced_labels(rng: np.random.Generator, n: int, num_classes: int) -> np.ndarray:
    """``n`` int64 labels cycling through ``num_classes`` classes, shuffled."""
    return rng.permutation(np.arange(n) % num_classes).astype(np.int64)


def _class_image(rng: np.random.Generator, label: int, height: int, width: int, noise: float = 20.0) -> np.ndarray:
    """A uint8 ``(height, width, 3)`` image: the class's mean colour plus Gaussian noise."""
    pixels = _CLASS_COLOURS[label] + rng.normal(0.0, noise, size=(height, width, 3))
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8)


def _class_images(rng: np.random.Generator, labels: np.ndarray, size: int = 32, noise: float = 20.0) -> np.ndarray:
    """Stack :func:`_class_image` of every label into uint8 ``(N, size, size, 3)``."""
    images = [_class_image(rng, int(label), size, size, noise) for label in labels]
    return np.stack(images) if images else np.zeros((0, size, size, 3), np.uint8)


def _random_size(rng: np.random.Generator) -> tuple[int, int]:
    """A random ``(height, width)`` in ``_SIZE_RANGE`` (varied aspect ratios)."""
    height, width = rng.integers(*_SIZE_RANGE, size=2)
    return int(height), int(width)


def _write_jpeg(path: Path, image: np.ndarray) -> None:
    """Save a uint8 HWC RGB array as a JPEG (PIL, quality 95), creating parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image, mode="RGB").save(path, format="JPEG", quality=95)


def _write_class_jpegs(rng: np.random.Generator, root: Path, files: list[str], labels: list[int]) -> list[tuple]:
    """Write one class-coloured JPEG of random size per ``root/file``; return their ``(h, w)``."""
    sizes = []
    for file, label in zip(files, labels):
        height, width = _random_size(rng)
        _write_jpeg(root / file, _class_image(rng, label, height, width))
        sizes.append((height, width))
    return sizes


# ----------------------------------------------------------------------------- CIFAR pickles


class _Py2Pickler(pickle._Pickler):
    """A protocol-2 pickler writing ``bytes`` as Python 2 ``str`` (the real CIFAR files' opcodes).

    The real batches were pickled by Python 2: ``pickle.load(f, encoding="bytes")`` gives bytes
    keys and ``encoding="latin1"`` (torchvision) gives str keys. Plain Python 3 bytes would stay
    bytes under both, so a torchvision-style reader would fail on them while the real files work.
    """

    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _write_py2_pickle(path: Path, obj: dict) -> None:
    """Pickle ``obj`` like Python 2's cPickle (protocol 2, byte strings as ``str``)."""
    buffer = io.BytesIO()
    _Py2Pickler(buffer, protocol=2).dump(obj)
    path.write_bytes(buffer.getvalue())


def _cifar_rows(images: np.ndarray) -> np.ndarray:
    """NHWC uint8 images to CIFAR rows ``(N, 3072)``: the R plane, then G, then B (row-major)."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(len(images), 3 * 32 * 32), dtype=np.uint8)


def _cifar_filenames(labels: np.ndarray, names: tuple[str, ...], offset: int) -> list[bytes]:
    """File names like the real ``leptodactylus_pentadactylus_s_000004.png`` (bytes)."""
    return [f"{names[label]}_s_{offset + i:06d}.png".encode() for i, label in enumerate(labels)]


def _cifar_batch(label: str, images: np.ndarray, labels: np.ndarray, names: tuple, offset: int) -> dict:
    """A CIFAR-10 batch dict (bytes keys and values)."""
    return {
        b"batch_label": label.encode(),
        b"labels": labels.tolist(),
        b"data": _cifar_rows(images),
        b"filenames": _cifar_filenames(labels, names, offset),
    }


def write_cifar10(root: str | Path, n_train: int = 50, n_test: int = 20, seed: int = 0) -> dict:
    """Write a tiny CIFAR-10 in the real python-pickle layout under ``root/cifar-10-batches-py/``.

    Files: ``data_batch_1`` .. ``data_batch_5`` (train images spread evenly), ``test_batch`` and
    ``batches.meta``, each a Python-2-style pickle of a dict (see :class:`_Py2Pickler`).

    Args:
        root: The data directory (created if missing).
        n_train: Number of training images (divisible by 5).
        n_test: Number of test images.
        seed: Seed of images and labels.

    Returns:
        ``train_images``/``test_images`` (uint8 NHWC ``(N, 32, 32, 3)``) and
        ``train_labels``/``test_labels`` (int64).

    Raises:
        ValueError: ``n_train`` is not divisible by 5.
    """
    if n_train % 5:
        raise ValueError(f"n_train={n_train} must be divisible by 5 (five train batches)")
    folder = Path(root) / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        out[f"{split}_labels"] = _balanced_labels(rng, n, len(CIFAR10_CLASSES))
        out[f"{split}_images"] = _class_images(rng, out[f"{split}_labels"])
    per = n_train // 5
    for b in range(5):
        rows = slice(b * per, (b + 1) * per)
        batch = _cifar_batch(f"training batch {b + 1} of 5", out["train_images"][rows],
                             out["train_labels"][rows], CIFAR10_CLASSES, b * per)
        _write_py2_pickle(folder / f"data_batch_{b + 1}", batch)
    test = _cifar_batch("testing batch 1 of 1", out["test_images"], out["test_labels"], CIFAR10_CLASSES, n_train)
    _write_py2_pickle(folder / "test_batch", test)
    meta = {b"num_cases_per_batch": per, b"label_names": [c.encode() for c in CIFAR10_CLASSES], b"num_vis": 3072}
    _write_py2_pickle(folder / "batches.meta", meta)
    return out


def write_cifar100(root: str | Path, n_train: int = 50, n_test: int = 20, seed: int = 0) -> dict:
    """Write a tiny CIFAR-100 in the real python-pickle layout under ``root/cifar-100-python/``.

    Files: ``train``, ``test`` (dicts with ``filenames``, ``batch_label``, ``fine_labels``,
    ``coarse_labels``, ``data``) and ``meta`` (``fine_label_names``, ``coarse_label_names``).
    Fine labels are drawn from 0..99; coarse labels follow the real superclass table.

    Args:
        root: The data directory (created if missing).
        n_train: Number of training images.
        n_test: Number of test images.
        seed: Seed of images and labels.

    Returns:
        ``train_images``/``test_images`` (uint8 NHWC) and ``train_labels``/``test_labels``
        (int64 fine labels).
    """
    folder = Path(root) / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        labels = rng.integers(0, len(CIFAR100_CLASSES), size=n).astype(np.int64)
        images = _class_images(rng, labels)
        out[f"{split}_images"], out[f"{split}_labels"] = images, labels
        batch = {
            b"filenames": _cifar_filenames(labels, CIFAR100_CLASSES, 0),
            b"batch_label": f"{'training' if split == 'train' else 'testing'} batch 1 of 1".encode(),
            b"fine_labels": labels.tolist(),
            b"coarse_labels": CIFAR100_COARSE_OF_FINE[labels].tolist(),
            b"data": _cifar_rows(images),
        }
        _write_py2_pickle(folder / split, batch)
    meta = {
        b"fine_label_names": [c.encode() for c in CIFAR100_CLASSES],
        b"coarse_label_names": [c.encode() for c in CIFAR100_COARSE_CLASSES],
    }
    _write_py2_pickle(folder / "meta", meta)
    return out


def write_cifar10_c(root: str | Path, corruptions: tuple[str, ...] = ("snow",), n: int = 40, seed: int = 0) -> dict:
    """Write a tiny CIFAR-10-C under ``root/CIFAR-10-C/`` (``<name>.npy`` and ``labels.npy``).

    Each ``<name>.npy`` is uint8 ``(5 * n, 32, 32, 3)`` with severity ``s`` in rows
    ``(s - 1) * n : s * n`` (noise grows with severity); ``labels.npy`` is uint8 ``(5 * n,)``,
    the same ``n`` labels tiled 5 times, as in the real set.

    Args:
        root: The data directory (created if missing).
        corruptions: Corruption names (file stems).
        n: Images per severity.
        seed: Seed of images and labels.

    Returns:
        ``images`` (``{name: uint8 array}``) and ``labels`` (the uint8 ``(5 * n,)`` array).
    """
    folder = Path(root) / "CIFAR-10-C"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = _balanced_labels(rng, n, len(CIFAR10_CLASSES))
    labels = np.tile(base, CIFAR_C_SEVERITIES).astype(np.uint8)
    np.save(folder / "labels.npy", labels)
    images = {}
    for name in corruptions:
        severities = [_class_images(rng, base, noise=10.0 * s) for s in range(1, CIFAR_C_SEVERITIES + 1)]
        images[name] = np.concatenate(severities)
        np.save(folder / f"{name}.npy", images[name])
    return {"images": images, "labels": labels}


# ----------------------------------------------------------------------------- JPEG sets


def write_domainnet(
    root: str | Path,
    domain: str = "clipart",
    classes: tuple[str, ...] = ("aircraft_carrier", "airplane", "alarm_clock"),
    per_class: int = 8,
    seed: int = 0,
) -> dict:
    """Write tiny DomainNet class folders: ``root/domainnet/<domain>/<class>/<domain>_<k>_<i>.jpg``.

    As in the real set, ``k`` is the 1-based class number (``clipart_001_000001.jpg`` is an
    ``aircraft_carrier``, class index 0) with 3 digits and ``i`` a 6-digit image number.

    Args:
        root: The data directory (created if missing).
        domain: Domain folder name (``clipart``, ``sketch``, ...).
        classes: Class folder names, in class-index order.
        per_class: Images per class.
        seed: Seed of image sizes and pixels.

    Returns:
        ``classes`` (list), ``files`` (paths relative to ``root/domainnet/<domain>`` in sorted
        class-folder order, like ImageFolder), ``labels`` (indices into ``classes``) and
        ``sizes`` (``(height, width)`` per file).
    """
    folder = Path(root) / "domainnet" / domain
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    entries = [
        (f"{name}/{domain}_{k + 1:03d}_{i:06d}.jpg", k)
        for k, name in enumerate(classes)
        for i in range(1, per_class + 1)
    ]
    entries.sort(key=lambda entry: (classes[entry[1]], entry[0]))  # ImageFolder order
    files, labels = [file for file, _ in entries], [label for _, label in entries]
    sizes = _write_class_jpegs(rng, folder, files, labels)
    return {"classes": list(classes), "files": files, "labels": labels, "sizes": sizes}


def _three_way_split(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """A random disjoint partition of the ids ``1..n`` into thirds, each part sorted."""
    ids = rng.permutation(np.arange(1, n + 1))
    cuts = (n // 3, 2 * (n // 3))
    return [np.sort(part) for part in np.split(ids, cuts)]


def write_flowers102(root: str | Path, n: int = 30, num_classes: int = 5, seed: int = 0) -> dict:
    """Write a tiny Flowers102 in torchvision's layout under ``root/flowers-102/``.

    Files: ``jpg/image_00001.jpg`` .. ``jpg/image_<n>.jpg``, ``imagelabels.mat`` (``labels``:
    uint8 ``(1, n)``, 1-based) and ``setid.mat`` (``trnid``, ``valid``, ``tstid``: uint16
    ``(1, k)`` 1-based image ids, a disjoint partition into thirds, each increasing).

    Args:
        root: The data directory (created if missing).
        n: Number of images (at least 6, so every split holds 2+ ids).
        num_classes: Number of classes (labels cycle through all of them).
        seed: Seed of labels, splits, sizes and pixels.

    Returns:
        ``labels`` (0-based int64 over images 1..n), ``trnid``/``valid``/``tstid`` (1-based
        int64 arrays) and ``sizes`` (``(height, width)`` per image, in id order).
    """
    from scipy.io import savemat

    folder = Path(root) / "flowers-102"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = _balanced_labels(rng, n, num_classes)
    trnid, valid, tstid = _three_way_split(rng, n)
    files = [f"jpg/image_{i:05d}.jpg" for i in range(1, n + 1)]
    sizes = _write_class_jpegs(rng, folder, files, labels.tolist())
    savemat(folder / "imagelabels.mat", {"labels": (labels + 1).astype(np.uint8).reshape(1, -1)})
    split_ids = {"trnid": trnid, "valid": valid, "tstid": tstid}
    savemat(folder / "setid.mat", {key: ids.astype(np.uint16).reshape(1, -1) for key, ids in split_ids.items()})
    return {"labels": labels, **{key: ids.astype(np.int64) for key, ids in split_ids.items()}, "sizes": sizes}


def _pets_class_ids(breeds: tuple[str, ...]) -> list[tuple[str, int, int, int]]:
    """``(breed, class_id, species, breed_id)`` rows in class-id order (all ids 1-based).

    Class ids sort breeds ignoring case, like the real list; cats are the capitalised breeds
    (species 1), dogs the lower-case ones (species 2); breed ids count within a species.
    """
    rows, per_species = [], {1: 0, 2: 0}
    for class_id, breed in enumerate(sorted(breeds, key=str.lower), 1):
        species = 1 if breed[0].isupper() else 2
        per_species[species] += 1
        rows.append((breed, class_id, species, per_species[species]))
    return rows


def _pets_assign(rng: np.random.Generator, n_trainval: int, n_test: int, num_classes: int) -> dict:
    """Per split, ``(label, image number)`` pairs sorted by label then number (numbers 1-based per breed)."""
    counts = {split: np.bincount(_balanced_labels(rng, n, num_classes), minlength=num_classes)
              for split, n in (("trainval", n_trainval), ("test", n_test))}
    assigned = {"trainval": [], "test": []}
    for label in range(num_classes):
        splits = ["trainval"] * int(counts["trainval"][label]) + ["test"] * int(counts["test"][label])
        for number, split in enumerate(rng.permutation(splits), 1):
            assigned[str(split)].append((label, number))
    return {split: sorted(pairs) for split, pairs in assigned.items()}


def write_pets(
    root: str | Path,
    n_trainval: int = 20,
    n_test: int = 16,
    breeds: tuple[str, ...] = ("Abyssinian", "american_bulldog", "Bengal", "beagle"),
    seed: int = 0,
) -> dict:
    """Write a tiny Oxford-IIIT Pet in torchvision's layout under ``root/oxford-iiit-pet/``.

    Files: ``images/<breed>_<i>.jpg`` (``i`` 1-based per breed, shared by both splits),
    ``annotations/trainval.txt`` and ``annotations/test.txt`` (lines ``<image_id> <class_id>
    <species> <breed_id>``, see :func:`_pets_class_ids`) and the empty folders
    ``annotations/trimaps/`` and ``annotations/xmls/``.

    Args:
        root: The data directory (created if missing).
        n_trainval: Number of trainval images.
        n_test: Number of test images.
        breeds: Breed names (capitalised: cat, lower-case: dog), in any order.
        seed: Seed of labels, split assignment, sizes and pixels.

    Returns:
        ``classes`` (breeds in class-id order), ``trainval``/``test`` (``(image_id, 0-based
        label)`` in file-line order) and ``sizes`` (``{image_id: (height, width)}``).
    """
    folder = Path(root) / "oxford-iiit-pet"
    for sub in ("images", "annotations/trimaps", "annotations/xmls"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    rows = _pets_class_ids(breeds)
    out = {"classes": [row[0] for row in rows], "sizes": {}}
    for split, pairs in _pets_assign(rng, n_trainval, n_test, len(rows)).items():
        ids = [f"{rows[label][0]}_{number}" for label, number in pairs]
        labels = [label for label, _ in pairs]
        sizes = _write_class_jpegs(rng, folder / "images", [f"{i}.jpg" for i in ids], labels)
        out["sizes"].update(zip(ids, sizes))
        lines = [f"{i} {rows[label][1]} {rows[label][2]} {rows[label][3]}\n" for i, label in zip(ids, labels)]
        (folder / "annotations" / f"{split}.txt").write_text("".join(lines))
        out[split] = list(zip(ids, labels))
    return out


def write_imagenet_val(
    root: str | Path,
    wnids: tuple[str, ...] = ("n01440764", "n01443537", "n01484850"),
    per_class: int = 6,
    seed: int = 0,
) -> dict:
    """Write a tiny ILSVRC-2012 val in class folders: ``root/imagenet/val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG``.

    Image numbers ``1..N`` go to a random permutation of the images, so they are unique and
    interleaved across classes like the real set.

    Args:
        root: The data directory (created if missing).
        wnids: WordNet ids (class folders), in class-index order.
        per_class: Images per class.
        seed: Seed of numbering, sizes and pixels.

    Returns:
        ``classes`` (the wnids), ``files`` (paths relative to ``root/imagenet/val`` in sorted
        class-folder order, like ImageFolder), ``labels`` and ``sizes`` (``(height, width)``).
    """
    folder = Path(root) / "imagenet" / "val"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    numbers = rng.permutation(len(wnids) * per_class) + 1
    entries = [
        (f"{wnid}/ILSVRC2012_val_{numbers[k * per_class + i]:08d}.JPEG", k)
        for k, wnid in enumerate(wnids)
        for i in range(per_class)
    ]
    entries.sort(key=lambda entry: (wnids[entry[1]], entry[0]))  # ImageFolder order
    files, labels = [file for file, _ in entries], [label for _, label in entries]
    sizes = _write_class_jpegs(rng, folder, files, labels)
    return {"classes": list(wnids), "files": files, "labels": labels, "sizes": sizes}


def corrupt_file(path: str | Path, mode: str = "truncate") -> None:
    """Damage a data file in place, to test corrupt-data errors.

    Args:
        path: The file to damage.
        mode: ``"truncate"`` keeps the first half of the bytes; ``"garbage"`` overwrites the file
            with (seeded) random bytes of the same length.

    Raises:
        ValueError: Unknown ``mode``.
    """
    path = Path(path)
    data = path.read_bytes()
    if mode == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif mode == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, size=len(data), dtype=np.uint8).tobytes())
    else:
        raise ValueError(f"corrupt_file: unknown mode {mode!r} (use 'truncate' or 'garbage')")


# Sizes a fixture data directory made by write_all_datasets gives for each dataset (train, val, test).
ALL_SIZES = {
    "fashion_mnist": (160, 40, 100),
    "cifar10": (40, 10, 20),
    "cifar100": (40, 10, 20),
    "cifar10_c/snow": (26, 6, 8),
    "cifar10_c/contrast": (26, 6, 8),
    "domainnet/clipart": (15, 4, 5),
    "domainnet/sketch": (15, 4, 5),
    "flowers102": (8, 2, 10),
    "pets": (16, 4, 16),
    "imagenet": (0, 0, 18),
}


def write_all_datasets(root: str | Path) -> Path:
    """Write one tiny fixture of every dataset format into ``root`` (see :data:`ALL_SIZES`).

    DomainNet and ImageNet have 3 class folders (use ``dataset.num_classes=3``).
    """
    root = Path(root)
    write_fashion_mnist(root, n_train=200, n_test=100, seed=0)
    write_cifar10(root, n_train=50, n_test=20)
    write_cifar100(root, n_train=50, n_test=20)
    write_cifar10_c(root, corruptions=("snow", "contrast"), n=40)
    write_domainnet(root, "clipart", per_class=8)
    write_domainnet(root, "sketch", per_class=8, seed=1)
    write_flowers102(root, n=30)
    write_pets(root, n_trainval=20, n_test=16)
    write_imagenet_val(root, per_class=6)
    return root


# ------------------------------------------------------------------ two launches of one run compared

UNEQUAL = frozenset({"run_dir", "train_s", "wall_s", "resumed"})
"""The record fields that may differ between two launches of one run: where, how long, resumed or not."""


def record(run: Path) -> dict:
    """A run's ``result.json``."""
    return json.loads((Path(run) / "result.json").read_text())


def assert_same_record(a: dict, b: dict) -> None:
    """Every field of two records but :data:`UNEQUAL`."""
    assert a.keys() == b.keys()
    assert {k: v for k, v in a.items() if k not in UNEQUAL} == {k: v for k, v in b.items() if k not in UNEQUAL}


def metric_rows(path: Path, columns: list[str]) -> dict[str, list[tuple[int, str]]]:
    """One metrics file's (step, value) per column, the value's text as written (compared bit for bit)."""
    with open(path, newline="") as f:
        table = list(csv.DictReader(f))
    return {c: [(int(r["step"]), r[c]) for r in table if r.get(c)] for c in columns}


def assert_rows_match(reference: Path, part: Path, columns: list[str]) -> dict[str, set[int]]:
    """Every row of one metrics file (a part of a resumed run, read before a relaunch can touch it)
    equals the row of ``reference`` (an uninterrupted run's ``metrics.csv``) at the same step, each
    step once in it; returns its steps per column."""
    expected = {c: dict(r) for c, r in metric_rows(reference, columns).items()}
    steps = {}
    for column, got in metric_rows(part, columns).items():
        assert len({s for s, _ in got}) == len(got), (part.name, column)  # no step twice in one file
        assert got == [(s, expected[column].get(s)) for s, _ in got], (part.name, column)
        steps[column] = {s for s, _ in got}
    return steps


def assert_same_weights(a: Path, b: Path) -> None:
    """Two checkpoints' ``state_dict``: the same keys, every tensor equal."""
    import torch

    wa, wb = (torch.load(p, map_location="cpu", weights_only=True)["state_dict"] for p in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), b


def assert_same_run(whole: Path, other: Path, columns: list[str], steps: int, resumed: bool = True) -> None:
    """Everything the report reads of two launches of one run, bit for bit: the record, every
    metric row at its step (``metrics.csv`` and a resumed run's parts read as one), both checkpoints'
    weights (``last.ckpt``: the last step's, ``steps``)."""
    import torch

    from plasticity.report.collect import read_metrics

    a, b = record(whole), record(other)
    assert_same_record(a, b)
    assert b["resumed"] is resumed and a["resumed"] is False and b["steps"] == steps
    ma, _ = read_metrics(whole, columns)
    mb, problems = read_metrics(other, columns)
    assert not problems
    for column in columns:
        assert len(ma[column][0]) > 0, column
        assert ma[column][0].tolist() == mb[column][0].tolist(), column  # the steps: each once
        assert ma[column][1].tolist() == mb[column][1].tolist(), column  # the values: bit for bit
    for name in ("last.ckpt", "best.ckpt"):
        assert_same_weights(whole / "checkpoints" / name, other / "checkpoints" / name)
    assert torch.load(other / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == steps
