"""The Lightning DataModule: a :class:`DataSpec`'s splits served as uint8 batches (token id batches
for a text set).

The train order is a function of (seed, epoch) (:class:`EpochBatchSampler`), and the train
loader (:class:`ResumableLoader`) saves its place in that order in every checkpoint, so a run
resumed from any checkpoint, inside an epoch or at its end, replays the exact batches of an
uninterrupted run. Crop, flip and normalisation run on the accelerator
(:mod:`plasticity.data.augment`), except on the JPEG path; text batches are not augmented.

Under DDP each process takes a disjoint share of the same orders (the rank and world size come
from the trainer; Lightning's own distributed sampler is off): of each global micro-step of
``world_size x micro_batch_size`` examples, rank ``r`` takes the ``r``-th slice, and validation
and test examples are split into disjoint contiguous shards that cover the set exactly once.
"""

from __future__ import annotations

import logging
import math
import os

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from plasticity.data.images import FileDataset, eval_transform, train_transform
from plasticity.data.sources import ArraySet, DataError, FileSet, train_problem
from plasticity.data.spec import DataSpec, load_splits
from plasticity.data.splits import Splits, expected_classes
from plasticity.data.text import TokenSet

__all__ = ["DataModule", "EpochBatchSampler", "ResumableLoader", "eval_batches", "resolve_workers"]

log = logging.getLogger(__name__)


class _BatchDataset(Dataset):
    """Returns a whole batch per index array: ``(uint8 (B, C, H, W), int64 (B,)[, int64 (B, 2)])`` for an
    image set (the third element, the images' original sizes, for prepared (squashed) train sets);
    ``(int64 (B, max_length), int64 (B,))`` for a token set, the ids right-padded with ``-1``
    (:data:`plasticity.data.text.PAD`; the model masks it)."""

    def __init__(self, part: ArraySet | TokenSet) -> None:
        self.text = isinstance(part, TokenSet)
        self.rows, self.labels = part.ids if self.text else part.images, part.labels
        self.sizes = None if self.text else part.sizes

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, indices: list[int] | np.ndarray) -> tuple[torch.Tensor, ...]:
        idx = np.asarray(indices, dtype=np.int64)
        order = np.argsort(idx, kind="stable")  # sorted reads are sequential in a memory map
        rows = np.empty((len(idx), *self.rows.shape[1:]), dtype=np.int64 if self.text else np.uint8)
        rows[order] = self.rows[idx[order]]
        inputs = torch.from_numpy(rows) if self.text else torch.from_numpy(rows).permute(0, 3, 1, 2).contiguous()
        batch = (inputs, torch.from_numpy(np.asarray(self.labels[idx], dtype=np.int64)))
        return batch if self.sizes is None else (*batch, torch.from_numpy(np.asarray(self.sizes[idx])))


class EpochBatchSampler(Sampler):
    """Shuffled batches of indices, the order a function of (seed, epoch), sharded over processes.

    The epoch's order is one permutation of ``n`` indices. Global micro-step ``k`` covers positions
    ``[k W b, (k + 1) W b)`` of it (``W`` processes, ``b`` the micro-batch); rank ``r`` takes the
    ``r``-th slice of ``b`` of them. The ranks are thus disjoint, and together see exactly what one
    process with micro-batch ``W b`` sees; the last partial global micro-step is dropped.
    Lightning calls :meth:`set_epoch` at the start of every epoch; :meth:`resume_at` makes the next
    pass over an epoch start after the batches a checkpoint says were consumed.

    Args:
        n: Examples in the training set.
        batch_size: Micro-batch of one process.
        seed: Seed of the orders.
        rank: This process's rank.
        world_size: Processes of the run.
        sample_seeds: Yield ``(index, seed)`` pairs: one seed per image and epoch, from the same
            generator as the order, for a transform drawn in a worker process (the JPEG path).
    """

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world_size: int = 1,
                 sample_seeds: bool = False) -> None:
        self.n, self.batch_size, self.seed, self.epoch = n, batch_size, seed, 0
        self.rank, self.world_size, self.sample_seeds = rank, world_size, sample_seeds
        self.skip: tuple[int, int] | None = None  # (epoch, batches): that epoch's next pass starts after them

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, consumed: int) -> None:
        """The next pass over ``epoch`` yields its batches from number ``consumed`` on; a checkpoint
        taken at the end of an epoch resumes at the start of the next one."""
        if consumed >= len(self):
            epoch, consumed = epoch + 1, 0
        self.epoch, self.skip = epoch, (epoch, consumed)

    def start(self) -> int:
        """The batch the next pass starts at (0 but on the resumed epoch's first pass)."""
        return self.skip[1] if self.skip is not None and self.skip[0] == self.epoch else 0

    def __iter__(self):
        # The order is drawn when the pass starts (the first batch is asked for): after set_epoch.
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=generator)
        seeds = torch.randint(1 << 62, (self.n,), generator=generator).tolist() if self.sample_seeds else None
        first, self.skip = self.start(), None  # the skip serves one pass only
        step = self.batch_size * self.world_size
        for k in range(first, len(self)):  # global micro-step k: this rank's slice of it
            begin = k * step + self.rank * self.batch_size
            batch = order[begin:begin + self.batch_size].tolist()
            yield batch if seeds is None else [(i, seeds[i]) for i in batch]

    def __len__(self) -> int:
        return self.n // (self.batch_size * self.world_size)


class ResumableLoader(DataLoader):
    """The train loader: a DataLoader that counts the batches it handed out in the current epoch
    and saves (epoch, count) in every checkpoint.

    Lightning saves the ``state_dict`` of a loader that has one with the fit loop's state and
    hands it back to :meth:`load_state_dict` before it iterates again (its stateful-dataloader
    support); the count is taken where batches leave the loader, so batches that worker processes
    prefetched but the loop never used are not counted.

    Its :class:`EpochBatchSampler` is its sampler (whole batches, ``batch_size=None``) or its batch
    sampler (the JPEG path's per-image dataset).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.consumed = 0

    @property
    def epoch_sampler(self) -> EpochBatchSampler:
        """The sampler that orders the batches."""
        return self.batch_sampler if isinstance(self.batch_sampler, EpochBatchSampler) else self.sampler

    def __iter__(self):
        self.consumed = self.epoch_sampler.start()
        for batch in super().__iter__():
            self.consumed += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch_sampler.epoch, "consumed": self.consumed,
                "batches": len(self.epoch_sampler), "world_size": self.epoch_sampler.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler = self.epoch_sampler
        if (state["batches"], state["world_size"]) != (len(sampler), sampler.world_size):
            # A checkpoint of another epoch length (another dataset size, batch or process count) has no place here.
            raise ValueError(f"the checkpoint's train loader had {state['batches']} batches an epoch on "
                             f"{state['world_size']} processes; this run has {len(sampler)} on {sampler.world_size}")
        sampler.resume_at(state["epoch"], state["consumed"])


def eval_batches(n: int, batch_size: int, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """The validation/test batches of one process: every example exactly once over all ranks.

    One process: ``0..n-1`` in order, in batches of ``batch_size`` (the last one smaller). ``W``
    processes: rank ``r`` takes the ``r``-th of ``W`` contiguous, nearly equal shards, cut into the
    same number of batches on every rank (at most ``batch_size`` each; one fewer on the smaller shards
    only when ``batch_size`` is 1), so the ranks stay in step and no example is padded or repeated.
    """
    if world_size == 1:
        return [list(range(s, min(s + batch_size, n))) for s in range(0, n, batch_size)]
    if n < world_size:
        raise ValueError(f"{n} evaluation examples cannot be shared by {world_size} processes (each needs one)")
    shard = np.array_split(np.arange(n), world_size)[rank]
    count = math.ceil(math.ceil(n / world_size) / batch_size)  # batches of the largest shard
    return [b.tolist() for b in np.array_split(shard, count) if len(b)]


def resolve_workers(num_workers: int | str) -> int:
    """``auto``: 0 without CUDA (two busy processes on a small CPU slow torch down), else up to 8; a
    number as it is (the config schema and the DataLoader check it)."""
    if num_workers == "auto":
        return min(8, max(1, (os.cpu_count() or 2) - 1)) if torch.cuda.is_available() else 0
    return num_workers


class DataModule(L.LightningDataModule):
    """Serves a dataset's splits as uint8 batches; the augmentation runs on the device.

    Array and prepared sets are served as whole batches built by fancy indexing. Unprepared
    JPEG sets use the torchvision JPEG path in worker processes (train crops and flips there;
    the device transform then only normalises, see :attr:`cpu_augment`). Text sets are served
    as whole batches of token ids, ``(int64 (B, max_length), int64 (B,))``, not augmented.

    Args:
        spec: What to read (:class:`DataSpec`; its ``img_size`` is the model's input side).
        micro_batch_size: Training batch size (``drop_last=True``).
        eval_batch_size: Validation/test batch size (default ``micro_batch_size``).
        num_workers: DataLoader worker processes, or ``auto`` (``dataset.num_workers``).
        seed: Seed of the training order (a ``torch.Generator``), independent of the splits.
        augment: Train with RandomResizedCrop + flip (else the eval transform) on the JPEG path.
        crop_scale: RandomResizedCrop scale range on the JPEG path.
        hflip: Horizontal flips on the JPEG path.
    """

    def __init__(self, spec: DataSpec, *, micro_batch_size: int, eval_batch_size: int | None = None,
                 num_workers: int | str, seed: int = 0, augment: bool = True,
                 crop_scale: tuple[float, float] = (0.08, 1.0), hflip: bool = True) -> None:
        super().__init__()
        self.spec, self.micro_batch_size = spec, micro_batch_size
        self.eval_batch_size = eval_batch_size or micro_batch_size
        self.num_workers, self.seed = resolve_workers(num_workers), seed
        self.num_classes = expected_classes(spec.name, spec.num_classes)
        self.augment, self.crop_scale, self.hflip = augment, tuple(crop_scale), hflip
        self.splits: Splits | None = None

    def check(self) -> None:
        """Raise before any compute if the data is missing or corrupt or cannot be trained on."""
        self.spec.check()
        if problem := train_problem(self.spec.name):
            raise DataError(problem)

    @property
    def split_hash(self) -> str:
        return self._splits().split_hash

    @property
    def cpu_augment(self) -> bool:
        """True when train batches arrive already cropped and flipped (the JPEG path)."""
        return isinstance(self._splits().train, FileSet)

    def prepare_data(self) -> None:
        self.spec.ensure()

    def setup(self, stage: str | None = None) -> None:
        if self.splits is not None:
            return
        self.splits = load_splits(self.spec)
        self._check_batches(len(self.splits.train))  # before a trainer exists (component=auto measures on train)
        if self.spec.source.kind == "files" and not self.splits.prepared:
            log.warning("%s: reading JPEG files (no prepared arrays for img_size %d). Run this command once with "
                        "task=prepare (the same dataset options) to decode them ahead of training.", self.spec.name,
                        self.spec.img_size)

    def _check_batches(self, n: int, world: int = 1) -> None:
        """Raise unless ``n`` training examples fill one micro-batch on each of ``world`` processes."""
        if n < self.micro_batch_size * world:
            processes = f" x {world} processes" if world > 1 else ""
            raise ValueError(f"{self.spec.name}: {n} training examples < micro_batch_size {self.micro_batch_size}"
                             f"{processes}; with drop_last there would be no training batch")

    def _splits(self) -> Splits:
        self.setup()
        return self.splits

    def _loader(self, dataset: Dataset, loader: type[DataLoader] = DataLoader, **kwargs) -> DataLoader:
        # Each new iterator draws a seed for its workers: from its own generator, not torch's
        # global one, which the augmentation draws from and every checkpoint saves.
        return loader(dataset, num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                      persistent_workers=self.num_workers > 0, generator=torch.Generator().manual_seed(self.seed),
                      **kwargs)

    def _ranks(self) -> tuple[int, int]:
        """(rank, world size) of this process in the trainer's run; (0, 1) without a trainer."""
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        train = self._splits().train
        rank, world = self._ranks()
        self._check_batches(len(train), world)
        files = isinstance(train, FileSet)
        sampler = EpochBatchSampler(len(train), self.micro_batch_size, self.seed, rank, world,
                                    sample_seeds=files and self.augment)
        if files:
            transform = (train_transform(self.spec.img_size, self.crop_scale, hflip=self.hflip) if self.augment
                         else eval_transform(self.spec.img_size))
            return self._loader(FileDataset(train, transform), ResumableLoader, batch_sampler=sampler)
        return self._loader(_BatchDataset(train), ResumableLoader, batch_size=None, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().val)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self._splits().test)

    def _eval_loader(self, arrays: ArraySet | TokenSet) -> DataLoader:
        batches = eval_batches(len(arrays), self.eval_batch_size, *self._ranks())
        return self._loader(_BatchDataset(arrays), batch_size=None, sampler=batches)
