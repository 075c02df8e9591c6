"""Every config group option composes, resolves and passes the pre-compute checks."""

import copy
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict, read_write
from PIL import Image

from plasticity.data import DATASETS
from plasticity.recipes import get, names, validate
from plasticity.runs import config_hash
from tests.test_trust import BUILT, launch

CONF = Path(__file__).resolve().parents[1] / "conf"


def options(group):
    folder = CONF / group
    return sorted(str(p.relative_to(folder).with_suffix("")) for p in folder.rglob("*.yaml")
                  if not p.name.startswith("_"))


def composed(*overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = "/tmp/plasticity-test-run"
    HydraConfig.instance().set_config(cfg)
    return cfg


GROUP_OPTIONS = [(g, o) for g in ("task", "model", "dataset", "component", "optimizer", "trainer",
                                  "logger", "paths", "experiment", "debug") for o in options(g)]


def missing_data(problem: str) -> bool:
    """A dataset the test's data folder does not hold (it holds Fashion-MNIST): a problem, not the config's.

    Every missing-data message starts with the dataset's name and says what it expected where."""
    return any(problem.startswith(f"{name}: ") for name in DATASETS) and "Expected" in problem


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Fashion-MNIST in its real idx format: the checks read real files, never ./data."""
    from tests.fixtures import write_fashion_mnist

    return write_fashion_mnist(tmp_path_factory.mktemp("data"), n_train=200, n_test=100)


def own_data(root: Path, option: str) -> list[str]:
    """What dataset=folder and dataset=table need: the user's data, a real one of each written under ``root``."""
    if option == "folder":
        for label in ("cat", "dog"):
            (root / "images" / label).mkdir(parents=True)
            for i in range(10):
                Image.new("RGB", (8, 8), (20 * i, 0, 0)).save(root / "images" / label / f"{i}.png")
        return [f"dataset.root={root / 'images'}"]
    (root / "texts.csv").write_text("text,label\n" + "".join(f"text number {i},{i % 2}\n" for i in range(40)))
    return [f"dataset.path={root / 'texts.csv'}", "model=minilm_l6"]


@pytest.mark.parametrize("group, option", GROUP_OPTIONS, ids=[f"{g}={o}" for g, o in GROUP_OPTIONS])
def test_every_group_option_composes_and_resolves(group, option, tmp_path, data_dir):
    # The analysis tasks default to the paper's ImageNet reference: check them with one that exists.
    extra = ["task.reference=fashion_mnist"] if f"{group}={option}" in ("task=plasticity", "task=bounds") else []
    if f"{group}={option}" in ("task=report", "task=dashboard"):
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "result.json").write_text("{}")
        extra = [f"sweep_dir={tmp_path}"]  # a folder with a record (./outputs may not exist in a clean clone)
    if group == "dataset" and option.startswith("text/"):  # a text set is read by a text model's tokenizer
        extra = ["model=minilm_l6"]
    if group == "model" and option in ("minilm_l6", "smollm2_135m"):  # a text model reads text
        extra = ["dataset=text/debates"]
    if group == "dataset" and option in ("folder", "table"):
        extra = own_data(tmp_path, option)
    cfg = composed(f"{group}={option}", f"paths.data_dir={data_dir}", *extra)
    job = OmegaConf.to_container(cfg, resolve=True)
    job.pop("hydra")
    assert job["run_name"].startswith(f"{job['task']['name']}/{job['dataset']['name']}/")
    if f"{group}={option}" == "trainer=gpu":
        job["trainer"]["accelerator"] = "auto"  # this test machine may have no CUDA (tested in test_trust)
    cfg = OmegaConf.create(job)
    problems = [p for p in validate(cfg) if not missing_data(p)]
    if group == "experiment" and option.startswith("quickstart") and option != "quickstart_pretrain":
        problems = [p for p in problems if "pretrain" not in p]  # they need the pretrained weights file
    if f"{group}={option}" == "dataset=imagenet":  # the reference only: training on it is refused
        assert len(problems) == 1 and "plasticity reference" in problems[0] and "task.reference=imagenet" in problems[0]
        return
    assert problems == []


def test_every_dataset_config_names_a_dataset():
    from plasticity.schema import USER_DATA  # the user's own data (folder:<root>, table:<path>): not a named set

    assert set(options("dataset")) == set(DATASETS) | set(USER_DATA)


def test_the_expected_groups_exist():
    assert {"ln1", "mha", "ln2", "fc1", "fc2", "emb", "all", "head", "auto"} == set(options("component"))
    assert {"none", "lora"} == set(options("adapter"))
    assert {"fashion_mnist", "fashion_mnist_c/motion_blur", "fashion_mnist_c/snow"} <= set(options("dataset"))


def test_defaults_are_the_paper_protocol():
    cfg = composed()
    assert cfg.model.name == "vit_base_patch16_224.orig_in21k"
    assert OmegaConf.to_container(cfg.optimizer) == {
        "_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.01, "momentum": 0.9, "weight_decay": 0.0}
    assert cfg.task.batch_size == 512 and cfg.trainer.gradient_clip_val == 1.0
    assert list(cfg.dataset.mean) == [0.485, 0.456, 0.406]
    assert cfg.seed == 0


def test_seed_zero_is_kept_and_named():
    cfg = composed("seed=0")
    assert cfg.run_name.endswith("/seed_0")


def test_quickstart_grid_is_seven_groups_on_six_held_out_targets_at_two_lrs_each():
    from plasticity.sweep import PlanSweeper

    grids = [composed(f"experiment={name}").hydra for name in ("quickstart", "quickstart_norms")]
    jobs = [dict(o.split("=", 1) for o in job) for grid in grids
            for job in PlanSweeper.job_lists(grid.sweeper.params, list(grid.overrides.task))]
    assert len(jobs) == 84  # 6 targets x 7 groups x 2 learning rates
    targets = {j["dataset"] for j in jobs}
    assert len(targets) == 6 and all(t.startswith("fashion_mnist_c/") for t in targets)
    lrs = {}
    for j in jobs:
        lrs.setdefault(j["component"], set()).add(float(j["optimizer.lr"]))
    assert lrs == {**dict.fromkeys(("mha", "fc1", "fc2", "all"), {0.1, 0.3}),
                   **dict.fromkeys(("ln1", "ln2", "head"), {0.3, 1.0})}
    cfg = composed("experiment=quickstart_norms")
    assert list(cfg.dataset.classes) == [5, 6, 7, 8, 9] and cfg.dataset.num_classes == 5
    pretrain = composed("experiment=quickstart_pretrain")
    assert list(pretrain.dataset.classes) == [0, 1, 2, 3, 4] and pretrain.callbacks.plasticity.downstream_classes \
        == [5, 6, 7, 8, 9]


def test_pretrain_task_defaults_to_full_training_with_adamw():
    cfg = composed("task=pretrain")
    assert cfg.component.name == "all" and cfg.optimizer._target_ == "torch.optim.AdamW"


def test_config_hash_ignores_paths_but_not_protocol():
    a, b = composed("paths.output_dir=/x"), composed("paths.output_dir=/y")
    c = composed("task.max_steps=7")
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_check_rejects_warmup_longer_than_training():
    cfg = composed("task.max_steps=100", "task.warmup_steps=100")
    assert any("task.warmup_steps=100 must be an integer in [0, task.max_steps=100)" in p for p in validate(cfg))


def test_wandb_logger_is_offline_grouped_and_tagged(tmp_path):
    from hydra.utils import instantiate

    cfg = composed("logger=wandb", "component=fc1", "optimizer.lr=0.03", "seed=42",
                   "dataset=fashion_mnist", "model=vit_micro")
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.runtime.output_dir = str(tmp_path)
    HydraConfig.instance().set_config(cfg)
    loggers = {name: instantiate(c) for name, c in cfg.logger.items()}
    assert set(loggers) == {"csv", "wandb"}
    init = loggers["wandb"]._wandb_init
    assert init["mode"] == "offline" and init["project"] == "plasticity"
    assert init["group"] == "fashion_mnist/vit_micro_patch7_28"
    assert init["tags"] == ["fc1", "lr=0.03", "seed=42"]
    assert init["name"] == "finetune/fashion_mnist/vit_micro_patch7_28/fc1/sgd_lr_0.03/seed_42"
    assert init["resume"] == "allow" and len(init["id"]) == 16
    other = composed("logger=wandb", "component=fc1", "optimizer.lr=0.03", "seed=0", "dataset=fashion_mnist",
                     "model=vit_micro")
    assert OmegaConf.to_container(other.logger.wandb, resolve=True)["id"] != init["id"]


@pytest.mark.parametrize("task", ["plasticity", "bounds"])
def test_analysis_tasks_default_to_the_paper_setting(task):
    cfg = composed(f"task={task}")
    assert cfg.task.reference == "imagenet" and cfg.task.n_pairs == 12_800 and cfg.task.pairing == "sequential"
    assert cfg.task.get("mode", "embedding") == "embedding"
    assert cfg.run_name.startswith(f"{task}/")


def test_report_needs_an_existing_sweep_dir(tmp_path):
    assert any("does not exist" in p for p in validate(composed("task=report", f"sweep_dir={tmp_path}/missing")))


def test_the_groups_resolver_and_the_quickstart_sweep_match_the_one_group_table():
    from plasticity.components import COMPONENTS, GROUPS, TABLE_ORDER

    assert list(composed("task=plasticity").task.groups) == list(GROUPS)
    swept = [c for name in ("quickstart", "quickstart_norms")
             for c in composed(f"experiment={name}").hydra.sweeper.params.component.split(",")]
    assert sorted(swept) == sorted(TABLE_ORDER)
    assert set(TABLE_ORDER) <= set(COMPONENTS)


def test_the_run_path_names_the_optimizer():
    assert composed("optimizer=adamw", "optimizer.lr=0.03").run_name.endswith("/mha/adamw_lr_0.03/seed_0")
    assert composed().run_name.endswith("/mha/sgd_lr_0.01/seed_0")


def test_tasks_are_the_recipes():
    assert set(options("task")) == set(names())


# ----------------------------------------------------------------------------------- the schema

WRONG = {bool: "maybe", int: [1.5], float: "abc", str: [1], list: "abc", dict: "abc", type(None): [{"x": 1}]}
"""A value of the wrong type for a leaf holding each type (an int where text belongs, text where a number does)."""
SCHEMA_OPTIONS = [(g, o) for g in ("task", "model", "dataset", "component", "adapter", "optimizer", "trainer", "logger",
                                   "callbacks", "paths") for o in options(g)]


def leaves(tree, prefix=""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.fixture(scope="module")
def compose_job():
    """Composes job configs (no hydra node) in one Hydra context: the schema test composes every option."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield lambda *overrides: compose("config", overrides=list(overrides))
    GlobalHydra.instance().clear()


@pytest.mark.parametrize("group, option", SCHEMA_OPTIONS, ids=[f"{g}={o}" for g, o in SCHEMA_OPTIONS])
def test_a_wrong_type_at_any_key_of_any_option_is_named_with_its_fix(group, option, compose_job):
    """Every leaf of the composed job config (the option's group and the top-level keys) fed a value of the
    wrong type: the schema names that key, in one line with its fix."""
    from plasticity.schema import check
    from plasticity.validate import Problems, resolved

    extra = {"dataset": ["model=minilm_l6"] if option.startswith("text/") else [],
             "model": ["dataset=text/debates"] if option in ("minilm_l6", "smollm2_135m") else []}.get(group, [])
    if group == "dataset" and option in ("folder", "table"):  # the user's data: a path (not read by the schema)
        extra = {"folder": ["dataset.root=images"], "table": ["dataset.path=texts.csv", "model=minilm_l6"]}[option]
    cfg = compose_job(f"{group}={option}", *extra)
    values = resolved(cfg, OmegaConf.to_container(cfg, resolve=False), Problems())
    assert check(values) == []
    keys = [(k, v) for k, v in leaves(values) if k.split(".")[0] in (group, "seed", "resume", "sweep", "run_name")
            and not k.endswith("._target_") and "${hydra:" not in str(v)]
    # wandb.init's own options pass through WandbLogger's **kwargs: wandb checks them.
    keys = [(k, v) for k, v in keys if not (k.startswith("logger.wandb.") and k.split(".")[2] in WANDB_INIT)]
    assert len(keys) >= 2
    for key, value in keys:
        wrong = WRONG[type(value)]
        if key == "task.name":  # which schema task.* has: validate stops at an unknown task first
            with pytest.raises(ValueError, match=r"task=\[1\] is not a task. Choices: bounds, .* Fix: task="):
                get(wrong)
            continue
        *parents, leaf = key.split(".")
        bad = copy.deepcopy(values)
        node = bad
        for part in parents:
            node = node[part]
        node[leaf] = wrong
        named = [p for p in check(bad) if p.startswith(f"{key}={wrong!r}")]
        assert len(named) == 1 and "Fix: " in named[0] and "\n" not in named[0], (key, check(bad))


WANDB_INIT = ("entity", "mode", "group", "job_type", "tags")
LAUNCHED = [("component.train_final_norm", "maybe"), ("task.max_steps", [1.5]), ("optimizer.lr", "abc"),
            ("model.name", [1]), ("dataset.mean", "abc"), ("seed", "abc"), ("sweep.skip_done", "maybe")]
"""Keys of each type and of the top level, fed a wrong type through the real launch path."""


@pytest.mark.parametrize("key, wrong", LAUNCHED, ids=[k for k, _ in LAUNCHED])
def test_a_wrong_type_given_to_launch_py_is_one_line_and_nothing_is_written(key, wrong, tmp_path, data_dir):
    proc = launch(tmp_path, data_dir, f"{key}={wrong}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "the config has 1 problem; nothing was run or written" in out, out[-3000:]
    (line,) = [line for line in out.splitlines() if line.startswith(f"  - {key}={wrong!r} ")]
    assert "Fix: " in line and BUILT not in out and "Traceback" not in out
    assert list(tmp_path.iterdir()) == []  # no run folder, no outputs, no log


def test_a_word_where_a_boolean_belongs_is_refused_before_training(tmp_path):
    # issue 25: component.train_final_norm=maybe trained (exit 0, a result written)
    problems = validate(composed("component.train_final_norm=maybe", f"paths.output_dir={tmp_path}"))
    assert "component.train_final_norm='maybe' must be true or false. Fix: component.train_final_norm=true or " \
           "component.train_final_norm=false." in problems
