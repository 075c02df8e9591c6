"""task=inspect_data and task=prepare through launch.py, and finetuning on a prepared JPEG set."""

import json
from pathlib import Path

import pytest

from tests.fixtures import ALL_SIZES, write_all_datasets, write_cifar10_c
from tests.test_launch import launch

BASE = ["model=vit_micro", "print_config=false"]
FOLDER_SETS = ("domainnet/clipart", "domainnet/sketch", "imagenet")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_all_datasets(tmp_path_factory.mktemp("all"))


def info(tmp_path: Path, name: str, severity: int = 5) -> dict:
    return json.loads((tmp_path / "outputs" / "inspect_data" / name / f"severity_{severity}" / "data_info.json").read_text())


def test_inspect_data_reports_every_fixture(tmp_path, data):
    others = ",".join(n for n in ALL_SIZES if n not in FOLDER_SETS)
    proc = launch(tmp_path, data, "task=inspect_data", f"dataset={others}", multirun=True, base=BASE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folders = launch(tmp_path, data, "task=inspect_data", f"dataset={','.join(FOLDER_SETS)}",
                     "dataset.num_classes=3", multirun=True, base=BASE)
    assert folders.returncode == 0, folders.stderr[-3000:]
    for name, sizes in ALL_SIZES.items():
        got = info(tmp_path, name)
        assert (got["train"], got["val"], got["test"]) == sizes, name
        assert got["dataset"] == name and len(got["split_hash"]) == 12
    assert info(tmp_path, "cifar100")["num_classes"] == 100 and info(tmp_path, "imagenet")["num_classes"] == 3
    assert "dataset=cifar10  num_classes=10  train=40  val=10  test=20  split_hash=" in proc.stdout


def test_inspect_cifar10_c_at_severity_5_gives_the_paper_sizes(tmp_path):
    write_cifar10_c(tmp_path / "data", ("motion_blur",), n=10_000)
    proc = launch(tmp_path, tmp_path / "data", "task=inspect_data", "dataset=cifar10_c/motion_blur", base=BASE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = info(tmp_path, "cifar10_c/motion_blur")
    assert (got["train"], got["val"], got["test"], got["num_classes"]) == (6400, 1600, 2000, 10)


def test_missing_data_stops_before_compute_with_the_fix(tmp_path):
    proc = launch(tmp_path, tmp_path / "nothing", "task=inspect_data", "dataset=pets", base=BASE)
    assert proc.returncode == 1
    err = proc.stdout + proc.stderr
    assert "pets: missing folder" in err and "oxford-iiit-pet" in err and "dataset.download=true" in err
    assert not (tmp_path / "outputs").exists()  # rejected before compute: nothing written


def test_prepare_then_finetune_reads_the_arrays(tmp_path, data):
    common = ["dataset=domainnet/clipart", "dataset.num_classes=3"]
    prep = launch(tmp_path, data, "task=prepare", "task.train_size=36", "task.workers=2", *common, base=BASE)
    assert prep.returncode == 0, prep.stderr[-3000:]
    record = json.loads((tmp_path / "outputs" / "prepare" / "domainnet" / "clipart" / "36" / "result.json").read_text())
    assert record["status"] == "done" and record["sizes"] == {"train": 15, "val": 4, "test": 5}
    assert (data / "prepared" / "domainnet" / "clipart" / "28" / "train.npy").is_file()
    tiny = ["trainer=cpu", "task.max_steps=3", "task.warmup_steps=1", "task.val_every=3", "task.batch_size=4",
            "task.micro_batch_size=4", "trainer.enable_progress_bar=false", "trainer.num_sanity_val_steps=0"]
    run = launch(tmp_path, data, *common, *tiny, "component=mha", base=BASE)
    assert run.returncode == 0, run.stderr[-3000:]
    out = tmp_path / "outputs" / "finetune" / "domainnet" / "clipart" / "vit_micro_patch7_28" / "mha" / "sgd_lr_0.01" / "seed_0"
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "done" and result["steps"] == 3 and result["split_hash"] == record["split_hash"]
    assert "reading JPEG files" not in run.stderr


def test_plasticity_with_the_imagenet_reference_reads_jpegs(tmp_path, data):
    proc = launch(tmp_path, data, "task=plasticity", "task.reference=imagenet", "dataset=domainnet/clipart",
                  "dataset.num_classes=3", "task.n_pairs=5", "task.batch_size=5", "task.device=cpu", base=BASE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = next((tmp_path / "outputs" / "plasticity" / "domainnet" / "clipart").rglob("plasticity.json"))
    summary = json.loads(out.read_text())
    assert summary["reference"] == "imagenet" and summary["n_pairs"] == 5
    assert {r["group"] for r in summary["ranking"]} == {"ln1", "mha", "ln2", "fc1", "fc2"}
    assert all(r["mean"] > 0 for r in summary["ranking"])


def test_finetune_on_unprepared_jpegs_uses_the_jpeg_path(tmp_path, data):
    tiny = ["trainer=cpu", "task.max_steps=2", "task.warmup_steps=1", "task.val_every=2", "task.batch_size=4",
            "task.micro_batch_size=4", "trainer.enable_progress_bar=false", "trainer.num_sanity_val_steps=0"]
    run = launch(tmp_path, data, "dataset=pets", *tiny, "component=ln1", f"paths.prepared_dir={tmp_path}/none",
                 base=BASE)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pets: reading JPEG files" in run.stdout + run.stderr
    out = tmp_path / "outputs" / "finetune" / "pets" / "vit_micro_patch7_28" / "ln1" / "sgd_lr_0.01" / "seed_0"
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "done" and result["steps"] == 2 and 0.0 <= result["test_acc"] <= 1.0
