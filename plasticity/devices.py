"""Where a run computes and in which precision: ``auto`` means the same thing in every task.

``device: auto`` is CUDA when there is one, else the CPU; ``precision: auto`` is bf16-mixed when
the run computes on CUDA, else 32-true. Finetuning (``trainer.precision``), the linear probe and
the analyses (``task.precision``, ``task.device``) all resolve them here.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, ContextManager

if TYPE_CHECKING:
    import torch

    from plasticity.validate import Problems

__all__ = ["autocast", "check_device", "device", "precision", "trainer_on_cuda"]


def device(name: str) -> "torch.device":
    """``auto``: CUDA when available, else CPU; any other name as torch reads it (``cuda:1``)."""
    import torch

    return torch.device(("cuda" if torch.cuda.is_available() else "cpu") if name == "auto" else name)


def precision(value: Any, on_cuda: bool) -> str:
    """``trainer.precision`` or ``task.precision`` with ``auto`` resolved for a run on CUDA or not."""
    return ("bf16-mixed" if on_cuda else "32-true") if str(value) == "auto" else str(value)


def trainer_on_cuda(trainer: Any) -> bool:
    """Whether a ``trainer`` config computes on CUDA: CUDA exists and the accelerator may use it."""
    import torch

    return torch.cuda.is_available() and trainer.accelerator in ("auto", "gpu", "cuda")


def autocast(precision: str, on: "torch.device") -> ContextManager:
    """bf16 autocast for ``bf16-mixed`` on CUDA; nothing otherwise (fp32 stays fp32 on the CPU)."""
    import torch

    cuda_bf16 = precision == "bf16-mixed" and on.type == "cuda"
    return torch.autocast("cuda", dtype=torch.bfloat16) if cuda_bf16 else nullcontext()


def check_device(value: Any, p: "Problems", local: bool) -> None:
    """``task.device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:<i>``; CUDA must exist when the job
    runs here (``local``; a SLURM launch checks it on the node)."""
    name = str(value)
    ok = name in ("auto", "cpu", "cuda") or (name.startswith("cuda:") and name[5:].isdigit())
    if not p.require(ok, f"task.device={value!r}; choices: auto, cpu, cuda, cuda:<index>. "
                         f"Fix: task.device=auto (CUDA when available, else the CPU)."):
        return
    if local and name.startswith("cuda"):
        import torch

        p.require(torch.cuda.is_available(),
                  f"task.device={name!r} needs CUDA, and this machine has no CUDA device. "
                  f"Fix: task.device=auto or task.device=cpu here, or run on a GPU node (hydra/launcher=slurm).")
