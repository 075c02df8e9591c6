"""Step time of finetuning each component group relative to full finetuning (``all``).

    python bench/train_step.py --model vit_base_patch16_224 --batch 128          # on a GPU
    python bench/train_step.py --model vit_micro_patch7_28 --batch 128 --img 28  # on a CPU

One step = forward, backward, the per-step gradient-norm logging of FinetuneModule, clipping at
norm 1 and an SGD step, on a synthetic batch (bf16 autocast on CUDA, fp32 on CPU), exactly the
parameters ``plasticity.components`` makes trainable. Prints, for each group: trainable
parameters, ms/step, the ratio to ``all`` and (CUDA) the peak memory. The FLOP model says a
LayerNorm-only step costs about 0.68 of a full step on ViT-B (no weight gradients; input
gradients still flow down to block 0), a head-only step about 0.34 (forward only).

``--components`` also takes combinations (``mha+fc1``) and LoRA (``mha_lora_r8``: rank 8, alpha
16, on MHA's qkv and proj); with ``mha`` among them a column gives each step time relative to full
MHA finetuning.

    python bench/train_step.py --vs-bare                # the framework against a bare loop (CPU, one thread)

``--vs-bare``: what the framework costs over the same arithmetic. A real ``launch.py`` finetuning
(``VS_BARE``: the micro ViT's FC1 on five Fashion-MNIST classes, 200 steps of 64 images, a validation
of 500 images and its two checkpoints every 20 steps, one thread), in its own process, against a
bare PyTorch loop in its own process on the same data, model, trained group, optimizer and schedule:
forward, backward, the logged loss and gradient norms, clipping at norm 1, SGD, the same validations
(the same best accuracy: printed), no checkpoint or log. Framework time: ``trainer.fit``; bare time:
from the optimizer's creation on; each as wall time and as the training thread's CPU time (less
affected by other load; blind to waits such as an fsync). Runs each ``--repeats`` times,
interleaved; prints the medians, their ratio and the median of the paired ratios (each framework run
over the bare run after it), and the framework's seconds in checkpoint saves on the training thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/plasticity.py is named like the package: keep this folder off the import path.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, installed or not

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import plasticity  # noqa: E402,F401  (registers vit_micro_patch7_28)
from plasticity.components import COMPONENTS, freeze, select  # noqa: E402
from plasticity.models import create_model  # noqa: E402
from plasticity.module import FinetuneModule  # noqa: E402


def measure(args: argparse.Namespace, component: str) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    net = create_model(args.model, num_classes=100, img_size=args.img).to(device)
    if "_lora_r" in component:  # e.g. mha_lora_r8: LoRA of rank 8 (alpha 2r) on the group's linear layers
        from plasticity.adapters import apply_lora

        groups, rank = component.split("_lora_r")
        net, selection = apply_lora(net, groups.split("+"), None, rank=int(rank), alpha=2 * int(rank), dropout=0.0)
    else:
        selection = select(net, component, train_final_norm=True)
        freeze(net, selection)
    module = FinetuneModule(net, selection, 100, optimizer=None, max_steps=1, warmup_steps=0,
                            train_transform=torch.nn.Identity(), eval_transform=torch.nn.Identity())
    params = [p for p in net.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    images = torch.randn(args.batch, 3, args.img, args.img, device=device)
    labels = torch.randint(0, 100, (args.batch,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step() -> None:
        with autocast:
            loss = F.cross_entropy(net(images), labels)
        loss.backward()
        module.grad_norms()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"component": component, "params": selection.counts["total"], "ms": 1e3 * seconds, "peak_gib": peak}


ROOT = Path(__file__).resolve().parents[1]
VS_BARE = ["model=vit_micro", "dataset=fashion_mnist", "dataset.classes=[5,6,7,8,9]", "dataset.num_classes=5",
           "dataset.eval_limit=500", "dataset.crop_scale=[0.85,1.0]", "component=fc1", "optimizer.lr=0.1",
           "trainer=cpu", "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false", "threads=1",
           "task.max_steps=200", "task.warmup_steps=20", "task.val_every=20", "task.batch_size=64",
           "task.micro_batch_size=64", "task.eval_batch_size=500", "print_config=false", "resume=false"]
"""The finetuning ``--vs-bare`` times (``paths.data_dir`` is the repository's ``data/``: ``make data``)."""


def bare_run(overrides: list[str]) -> tuple[float, float, float, float]:
    """A bare PyTorch loop doing the arithmetic of the launch of ``overrides``: its seconds (wall, and
    CPU of this thread, which runs every computation), its best validation accuracy and 0 (no checkpoint)."""
    import hydra
    import lightning as L
    from torch.nn.utils import clip_grad_norm_

    from plasticity.data.splits import expected_classes
    from plasticity.recipes.finetune import Finetune, build_datamodule, build_module, build_selection

    with hydra.initialize_config_dir(config_dir=str(plasticity.CONF_DIR), version_base="1.3"):
        cfg = hydra.compose("config", overrides=overrides)
    torch.set_num_threads(cfg.threads)
    L.seed_everything(cfg.seed, workers=True, verbose=False)  # what Finetune.fit draws, in its order
    classes = expected_classes(cfg.dataset.name, cfg.dataset.num_classes)
    net = Finetune(cfg, Path(tempfile.gettempdir())).create_net(classes)
    datamodule = build_datamodule(cfg, net)
    net, selection, _ = build_selection(cfg, net, datamodule)
    module = build_module(cfg, net, selection, datamodule, "bench")
    wall, cpu = time.perf_counter(), time.thread_time()
    config = module.configure_optimizers()
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    params, accuracies = [p for p in net.parameters() if p.requires_grad], []
    net.train()
    for step, (images, labels, *sizes) in enumerate(datamodule.train_dataloader(), start=1):
        loss = F.cross_entropy(net(module.train_transform(images, *sizes)), labels)
        loss.backward()
        [v.item() for v in (loss, *module.grad_norms().values())]  # the logged row's values
        clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % cfg.task.val_every == 0:
            accuracies.append(validate(net, module, datamodule.val_dataloader()))
        if step == cfg.task.max_steps:
            return time.perf_counter() - wall, time.thread_time() - cpu, max(accuracies), 0.0
    raise ValueError(f"the train set has fewer than task.max_steps={cfg.task.max_steps} batches")


def validate(net: torch.nn.Module, module: FinetuneModule, loader) -> float:
    """The validation accuracy, as the framework computes it (eval mode, no autograd)."""
    net.eval()
    correct, count = 0, 0
    with torch.inference_mode():
        for images, labels, *_ in loader:
            logits = net(module.eval_transform(images))
            correct += int((logits.argmax(1) == labels).sum())
            F.cross_entropy(logits, labels).item()  # the logged validation loss
            count += len(labels)
    net.train()
    return correct / count


def framework_run(overrides: list[str]) -> tuple[float, float, float, float]:
    """A real ``launch.py`` finetuning of ``overrides`` in this process (a temporary output folder):
    ``trainer.fit``'s seconds (wall, and CPU of this thread: the training's; a checkpoint writer's
    thread not counted), the record's best validation accuracy and the seconds the training thread
    spent in the strategy's ``save_checkpoint`` (the checkpoints' share of the step path)."""
    import runpy

    import lightning as L
    from lightning.pytorch.strategies import Strategy

    fit, save, timed, saving = L.Trainer.fit, Strategy.save_checkpoint, [], []

    def timed_fit(self, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.thread_time()
        fit(self, *args, **kwargs)
        timed.append((time.perf_counter() - wall, time.thread_time() - cpu))

    def timed_save(self, *args, **kwargs):
        start = time.perf_counter()
        save(self, *args, **kwargs)
        saving.append(time.perf_counter() - start)

    L.Trainer.fit, Strategy.save_checkpoint = timed_fit, timed_save
    with tempfile.TemporaryDirectory() as out:
        sys.argv = [str(ROOT / "launch.py"), *overrides, f"paths.output_dir={out}", f"paths.data_dir={ROOT / 'data'}"]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as end:
            if end.code:
                raise
        (result,) = Path(out).glob("**/result.json")
        return *timed[0], json.loads(result.read_text())["best_val_acc"], sum(saving)


def vs_bare(repeats: int) -> None:
    """Prints the framework's and the bare loop's median seconds (wall and CPU), their ratios, the
    medians of the paired ratios, both best validation accuracies (equal: the same arithmetic) and the
    framework's seconds in checkpoint saves on the training thread."""
    runs: dict[str, list[tuple[float, ...]]] = {"framework": [], "bare": []}
    for _ in range(repeats):
        for name in runs:  # each in its own process, one after the other
            done = subprocess.run([sys.executable, __file__, f"--{name}-run"], capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"})
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            runs[name].append(tuple(float(v) for v in done.stdout.split()[-4:]))
    print(f"# {' '.join(VS_BARE)}; {repeats} runs each, interleaved, torch {torch.__version__}")
    for i, kind in enumerate(("wall", "CPU")):
        medians = {name: statistics.median(r[i] for r in values) for name, values in runs.items()}
        paired = statistics.median(f[i] / b[i] for f, b in zip(runs["framework"], runs["bare"]))
        for name, values in runs.items():
            print(f"{kind:4s} {name:9s} median {medians[name]:.2f} s ({', '.join(f'{r[i]:.2f}' for r in values)})")
        print(f"{kind:4s} framework / bare: {medians['framework'] / medians['bare']:.3f}x (medians), "
              f"{paired:.3f}x (paired)")
    print("best val acc: " + ", ".join(f"{name} {sorted({r[2] for r in values})}" for name, values in runs.items()))
    saves = [r[3] for r in runs["framework"]]
    print(f"framework: checkpoint saves on the training thread, median {statistics.median(saves):.3f} s a run "
          f"({', '.join(f'{s:.3f}' for s in saves)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_base_patch16_224")
    parser.add_argument("--img", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--components", default=",".join(c for c in COMPONENTS if c != "emb"))
    parser.add_argument("--vs-bare", action="store_true", help="the framework against a bare loop (see above)")
    parser.add_argument("--repeats", type=int, default=3, help="--vs-bare: runs of each")
    parser.add_argument("--bare-run", action="store_true", help=argparse.SUPPRESS)  # one run of each, in its process
    parser.add_argument("--framework-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_run or args.framework_run:
        return print(*(bare_run if args.bare_run else framework_run)(VS_BARE))
    if args.vs_bare:
        return vs_bare(args.repeats)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    print(f"# {args.model}, batch {args.batch}, {args.img}px, {name}, torch {torch.__version__}")
    rows = [measure(args, c) for c in args.components.split(",")]
    full = next(r["ms"] for r in rows if r["component"] == "all")
    mha = next((r["ms"] for r in rows if r["component"] == "mha"), float("nan"))
    print("| group | trainable params | ms/step | ratio to all | ratio to mha | peak GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        peak = "-" if r["peak_gib"] != r["peak_gib"] else f"{r['peak_gib']:.2f}"
        print(f"| {r['component']} | {r['params']:,} | {r['ms']:.1f} | {r['ms'] / full:.2f} | {r['ms'] / mha:.2f} | "
              f"{peak} |")


if __name__ == "__main__":
    main()
