"""Every option checked before compute (issue 19, item 4; issue 25: one schema, the libraries checking their own
arguments): the optimizer's and the trainer's arguments, the callbacks' options and data, booleans written as
words at any key, values no run path can hold, output folders that cannot be written, and experiments that
compose with every launcher."""

import os
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from plasticity.validate import unwritable
from tests.test_trust import BUILT, launch

CONF = Path(__file__).resolve().parents[1] / "conf"
EXPERIMENTS = sorted(str(p.relative_to(CONF / "experiment").with_suffix(""))
                     for p in (CONF / "experiment").rglob("*.yaml") if not p.name.startswith("_"))
LAUNCHERS = ["basic", "joblib", "parallel", "local", "slurm"]


# ----------------------------------------------------------------------------------- launches

# Each launch holds several bad options of one kind: every problem is reported at once.
BAD = [
    # momentum below 1 is the project's rule (schema.Optimizer); weight_decay's sign is torch's, found by building
    ("sgd", ["optimizer.momentum=1.5", "optimizer.weight_decay=-0.1", "+optimizer.dampening=yes",
             "+optimizer.nesterv=true", "optimizer._partial_=false"],
     ["5 problems", "optimizer.momentum=1.5 must be a number in [0, 1)", "Fix: e.g. optimizer.momentum=0.9",
      "optimizer.weight_decay=-0.1 is refused by torch.optim.SGD (Invalid weight_decay value: -0.1)",
      "Fix: a value torch takes, e.g. torch's default optimizer.weight_decay=0",
      "optimizer.dampening='yes' must be a finite number. Fix: optimizer.dampening=<a finite number>",
      "optimizer.nesterv=True is not an argument of torch.optim.SGD (did you mean nesterov?)",
      "Fix: optimizer.nesterov=<value>", "optimizer._partial_=False must be true", "Fix: optimizer._partial_=true"]),
    ("nesterov", ["+optimizer.nesterov=true", "optimizer.momentum=0"],
     ["optimizer.nesterov=True is refused by torch.optim.SGD (Nesterov momentum requires a momentum and zero "
      "dampening). Fix: a value torch takes, e.g. torch's default optimizer.nesterov=False"]),
    ("adamw", ["optimizer=adamw", "optimizer.betas=[0.9,1.0]", "+optimizer.eps=-1", "+optimizer.momentum=0.9"],
     ["3 problems", "optimizer.betas=[0.9, 1.0] is refused by torch.optim.AdamW (Invalid beta parameter at index 1: "
      "1.0). Fix: a value torch takes, e.g. torch's default optimizer.betas=(0.9, 0.999)",
      "optimizer.eps=-1 is refused by torch.optim.AdamW (Invalid epsilon value: -1)",
      "optimizer.momentum=0.9 is not an argument of torch.optim.AdamW",
      "its arguments: lr, betas, eps", "Fix: drop optimizer.momentum"]),
    ("target", ["optimizer._target_=torch.optim.Sgd"],
     ["optimizer._target_='torch.optim.Sgd' is not a torch.optim optimizer class (did you mean torch.optim.SGD?)",
      "Fix: optimizer=sgd"]),
    ("cli_argument", ["optimizer.nesterov=true"], ["optimizer.nesterov is an argument of torch.optim.SGD",
                                                   "Fix: +optimizer.nesterov=<value>"]),
    # Lightning names its own choices (the Trainer is built): no copy of them here
    ("trainer", ["trainer.gradient_clip_val=-1", "trainer.gradient_clip_algorithm=l2", "trainer.precision=fp99",
                 "trainer.accelerator=gpus", "trainer.devices=0", "trainer.num_sanity_val_steps=-2",
                 "+trainer.max_tme=5", "trainer.enable_model_summary=off"],
     ["8 problems", "trainer.gradient_clip_val=-1 must be a non-negative number or null",
      "Fix: trainer.gradient_clip_val=1.0",
      "trainer.gradient_clip_algorithm='l2' is refused by lightning's Trainer (`gradient_clip_algorithm` l2 is "
      "invalid. Allowed algorithms:", "Fix: trainer.gradient_clip_algorithm=norm",
      "trainer.precision='fp99' is refused by lightning's Trainer (Precision 'fp99' is invalid. Allowed precision "
      "values: (", "Fix: trainer.precision=auto",
      "trainer.accelerator='gpus' is refused by lightning's Trainer (You selected an invalid accelerator name: "
      "`accelerator='gpus'`. Available names are:", "Fix: trainer=cpu",
      "trainer.devices=0 must be a positive number", "Fix: e.g. trainer.devices=",
      "trainer.num_sanity_val_steps=-2 must be an integer >= -1", "Fix: e.g. trainer.num_sanity_val_steps=0",
      "trainer.max_tme=5 is not an argument of lightning.pytorch.Trainer (did you mean max_time?)",
      "Fix: trainer.max_time=<value>", "trainer.enable_model_summary='off' must be true or false or null (it is text",
      "Fix: trainer.enable_model_summary=false, unquoted"]),
    ("callback", ["callbacks=plasticity", "callbacks.plasticity.reference=cifar10",
                  "callbacks.plasticity.every_n_steps=0", "callbacks.plasticity.mode=layers",
                  "callbacks.plasticity.groups=[mha,attn]", "+callbacks.plasticity.n_pair=8"],
     ["5 problems", "cifar10: missing", "paths.data_dir",
      "callbacks.plasticity.every_n_steps=0 must be a positive integer",
      "Fix: e.g. callbacks.plasticity.every_n_steps=100",
      "callbacks.plasticity.mode='layers'; choices: embedding, layer. Fix: callbacks.plasticity.mode=embedding",
      "callbacks.plasticity.groups=['mha', 'attn'] must be a non-empty list of values, each one of ln1, mha",
      "Fix: e.g. callbacks.plasticity.groups=[mha,fc1]",
      "callbacks.plasticity.n_pair=8 is not an argument of plasticity.callbacks.PlasticityCallback (did you mean "
      "n_pairs?)", "Fix: callbacks.plasticity.n_pairs=<value>"]),
    ("bool_words", ["dataset.augment=yes", "resume='false'", "trainer.enable_progress_bar=off", "model.pretrained=1",
                    "+optimizer.nesterov=yes", "component.train_final_norm=maybe", "+model.kwargs.qkv_bias=no"],
     ["7 problems", "dataset.augment='yes' must be true or false (it is text", "Fix: dataset.augment=true, unquoted",
      "resume='false' must be true or false", "Fix: resume=false, unquoted",
      "trainer.enable_progress_bar='off' must be true or false", "Fix: trainer.enable_progress_bar=false, unquoted",
      "model.pretrained=1 must be true or false", "Fix: model.pretrained=true or model.pretrained=false",
      "optimizer.nesterov='yes' must be true or false", "Fix: optimizer.nesterov=true, unquoted",
      "component.train_final_norm='maybe' must be true or false. Fix: component.train_final_norm=true or "
      "component.train_final_norm=false", "model.kwargs.qkv_bias='no' must be true or false (it is text",
      "Fix: model.kwargs.qkv_bias=false, unquoted"]),
    ("path_type", ["component.blocks=abc"], ["component.blocks='abc' must be a non-empty list of values, each a "
                                             "non-negative integer or null", "Fix: e.g. component.blocks=[8,9,10,11]"]),
    ("path_interpolation", ["seed=${oc.env:PLASTICITY_UNSET_VARIABLE}"],
     ["seed='${oc.env:PLASTICITY_UNSET_VARIABLE}' cannot be resolved",
      "Environment variable 'PLASTICITY_UNSET_VARIABLE' not found", "Fix: a plain value"]),
    ("path_missing", ["~optimizer._target_"], ["run_name=", "Interpolation key 'optimizer._target_' not found",
                                               "Fix:"]),
    ("output_under_file", ["paths.output_dir={file}/out"],
     ["paths.output_dir='{file}/out': the run's folder", "({file} is a file, not a folder)",
      "Fix: paths.output_dir=<a folder you can write>"]),
]


@pytest.mark.parametrize("name, overrides, messages", BAD, ids=[b[0] for b in BAD])
def test_a_bad_option_is_named_with_its_fix_before_compute(tmp_path_factory, data_dir, name, overrides, messages):
    root = tmp_path_factory.mktemp("launch")
    file = tmp_path_factory.mktemp("elsewhere") / "a_file"
    file.write_text("not a folder\n")
    proc = launch(root, data_dir, *[o.replace("{file}", str(file)) for o in overrides])
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    for message in messages:
        assert message.replace("{file}", str(file)) in out, out[-3000:]
    assert BUILT not in out and "Traceback" not in out
    assert list(root.iterdir()) == []  # nothing written
    assert file.read_text() == "not a folder\n"


def test_a_read_only_output_folder_is_named_before_compute(tmp_path, data_dir):
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    # Root writes into a folder of mode 555: as root, a read-only bind mount makes it read-only.
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["mount", "--bind", str(read_only), str(read_only)], check=True)
        subprocess.run(["mount", "-o", "remount,bind,ro", str(read_only)], check=True)
    else:
        read_only.chmod(0o555)
    try:
        proc = launch(tmp_path, data_dir, f"paths.output_dir={read_only}/outputs")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and f"({read_only} is read-only)" in out and "Fix: paths.output_dir=" in out
        assert BUILT not in out and "Traceback" not in out and list(read_only.iterdir()) == []
    finally:
        if as_root:
            subprocess.run(["umount", "-l", str(read_only)], check=False)
        else:
            read_only.chmod(0o755)


def test_a_multirun_names_the_bad_output_folder_in_every_job(tmp_path, data_dir):
    file = tmp_path / "a_file"
    file.write_text("")
    proc = launch(tmp_path, data_dir, f"paths.output_dir={file}/out", "seed=0,42", multirun=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "2 of 2 jobs have" in out and f"({file} is a file, not a folder)" in out
    assert BUILT not in out and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


# ----------------------------------------------------------------------------------- in-process


def test_unwritable_says_read_only_without_creating_anything(tmp_path, monkeypatch):
    target = tmp_path / "a" / "b"
    assert unwritable(target) is None and not (tmp_path / "a").exists()
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # as a read-only mount answers, even to root
    assert unwritable(target) == f"{tmp_path} is read-only"
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("overrides, message", [
    (["optimizer._target_=torch.nn.Linear"], "optimizer._target_='torch.nn.Linear' is not a torch.optim optimizer"),
    (["optimizer._target_=torch.optim.SGD/x"], "optimizer._target_='torch.optim.SGD/x' is not a torch.optim"),
    (["trainer.gradient_clip_val=abc"], "trainer.gradient_clip_val='abc' must be a non-negative number or null"),
    (["trainer.deterministic=maybe"], "trainer.deterministic='maybe' must be true or false or warn or null"),
    (["+optimizer.foreach=2"], "optimizer.foreach=2 must be true or false or null"),
    (["+trainer.max_epochs=3"], "trainer.max_epochs=3 is set by the task and would be ignored. Fix: task.max_steps"),
    (["task=plasticity", "task.reference=fashion_mnist", "+task.max_step=5"],
     "task.max_step=5 is not an option of task; its options: name, reference, n_pairs"),
    (["task=plasticity", "task.reference=fashion_mnist", "task.device=gpu"], "task.device='gpu'; choices: auto, cpu"),
    (["dataset.num_workers=-1"], "dataset.num_workers=-1 must be auto or a non-negative integer"),
    (["dataset.crop_scale=[0.9,0.5]"], "dataset.crop_scale=[0.9, 0.5] must be [low, high] with low <= high"),
])
def test_more_bad_options_are_named_with_their_fix(data_dir, overrides, message):
    from omegaconf import OmegaConf

    from plasticity.recipes import validate

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["debug=tiny", f"paths.data_dir={data_dir}", *overrides])
    GlobalHydra.instance().clear()
    problems = validate(OmegaConf.create(OmegaConf.to_container(cfg)))
    assert len(problems) == 1 and message in problems[0] and "Fix:" in problems[0], problems


def test_the_plasticity_callback_refuses_what_the_launch_refuses():
    from omegaconf import OmegaConf

    from plasticity.callbacks import PlasticityCallback
    from plasticity.validate import ConfigError

    options = {k: v for k, v in OmegaConf.load(CONF / "callbacks" / "plasticity.yaml").plasticity.items()
               if k != "_target_"}
    options.update(groups=["mha"], window=None)  # interpolations, resolved by the job
    assert PlasticityCallback(**options).n_pairs == 256  # the yaml's options are its only defaults
    with pytest.raises(ConfigError) as err:
        PlasticityCallback(**{**options, "every_n_steps": 0, "mode": "layers", "groups": ("mha", "attn")})
    assert len(err.value.problems) == 3 and "PlasticityCallback.every_n_steps=0 must be a positive integer" in \
        str(err.value) and "PlasticityCallback.mode='layers'; choices: embedding, layer" in str(err.value)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_with_every_launcher(experiment):
    for launcher in LAUNCHERS:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=[f"experiment={experiment}", f"hydra/launcher={launcher}"],
                          return_hydra_config=True)
        assert cfg.hydra.runtime.choices["hydra/launcher"] == launcher
    GlobalHydra.instance().clear()


def test_the_quickstart_runs_two_at_a_time_unless_another_launcher_is_named():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=quickstart"], return_hydra_config=True)
    assert cfg.hydra.launcher.n_jobs == 2 and "joblib" in cfg.hydra.launcher._target_
    GlobalHydra.instance().clear()


def test_a_run_path_value_with_a_slash_is_named():
    from omegaconf import OmegaConf

    from plasticity.validate import Problems, check_run_path, resolved

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["dataset=fashion_mnist_c/motion_blur"])
    OmegaConf.update(cfg, "optimizer._target_", "torch.optim.SGD/x")
    p = Problems()
    raw = OmegaConf.to_container(cfg, resolve=False)
    check_run_path(raw, resolved(cfg, raw, p), p)  # dataset.name's '/' is a folder on purpose: not named
    assert p.items == [f"optimizer._target_='torch.optim.SGD/x' would add a folder to the run's path "
                       f"({raw['run_name']}), which has one folder per key. Fix: a value without '/'."]
    GlobalHydra.instance().clear()
