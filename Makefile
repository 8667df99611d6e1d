# Entry points: `make run` (the pipeline), `make test` (the whole suite, as CI runs it) and
# `make test-fast` (the unit tests, in a few minutes).
# They create the virtualenv on first use: Python 3.11, the pinned TFX 1.16 family.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
PIP_FLAGS := --ignore-requires-python -c constraints.txt
# Extra flags for `nmt run`, e.g. make run ARGS="--data ~/fra.txt --profile cpu"
ARGS ?=
# Extra flags for pytest, e.g. make test PYTEST_ARGS="-m faults -x"
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` (0: one process, e.g. to use --pdb). Each worker gets
# whole modules, so a module's fixtures are built once (tests/conftest.py).
TEST_WORKERS ?= 2
# The unit tests: nothing that runs a pipeline, a Kubeflow spec, distributed training or a
# program outside the venv such as Flink's JVM (markers: pytest.ini, applied in tests/conftest.py).
FAST_MARKERS := not (pipeline or external or kubeflow or distributed or slow or flink)
# The figures generator runs with the venv's Python if there is one, else any Python 3.10+.
FIGURES_PYTHON := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))

.PHONY: venv run test test-fast figures figures-check clean chromium mariadb java flink flink-if-java \
	flink-cluster flink-cluster-stop

venv: $(VENV)/.installed

# tfx 1.16.0 declares Requires-Python <3.11 although its cp311 wheels work: hence
# --ignore-requires-python; the constraints file keeps pip from backtracking for minutes.
$(VENV)/.installed: setup.py constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(PIP_FLAGS) -e '.[test]'
	touch $@

run: venv flink-if-java
	$(BIN)/nmt run $(ARGS)

# `nmt run --beam-runner flink` runs Beam's Flink job server (engines/flink-job-server.pom.xml):
# Maven resolves its jars into ~/.m2, and a launcher jar naming them goes beside the venv's
# Python, where engines/flink.py finds it. Nothing is fetched at run time.
FLINK_JAR := $(VENV)/share/nmt/flink-job-server.jar
flink: venv $(FLINK_JAR)

$(FLINK_JAR): engines/flink-job-server.pom.xml engines/flink.py
	@command -v java >/dev/null || { echo "make flink: Java is missing (OpenJDK 17: apt-get install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "make flink: Maven is missing (apt-get install maven)"; exit 1; }
	mvn -q -f engines/flink-job-server.pom.xml dependency:build-classpath -Dmdep.outputFile=$(abspath $@).classpath
	$(BIN)/python -c 'import sys; from engines import flink; flink.write_launcher_jar(open(sys.argv[1]).read(), sys.argv[2])' $@.classpath $@
	rm $@.classpath

# A standalone Flink 1.16 session cluster on localhost (engines/flink_cluster.py): a JobManager,
# FLINK_TASKMANAGERS TaskManagers and Beam's worker pool, with engines/flink-conf.yaml; then
# `nmt run --beam-runner flink --flink-master 127.0.0.1:8081`. Its files: FLINK_CLUSTER_DIR.
FLINK_TASKMANAGERS ?= 2
FLINK_CLUSTER_DIR ?= nmt_runs/flink-cluster
flink-cluster: flink
	$(BIN)/python -m engines.flink_cluster start --taskmanagers $(FLINK_TASKMANAGERS) --dir $(FLINK_CLUSTER_DIR)

flink-cluster-stop:
	$(BIN)/python -m engines.flink_cluster stop --dir $(FLINK_CLUSTER_DIR)

# `make run` sets Flink up where Java and Maven are there, and says in one line when not.
flink-if-java: venv
	@if command -v java >/dev/null && command -v mvn >/dev/null; then \
		$(MAKE) --no-print-directory flink || echo "make run: Flink's job server could not be set up (see above), so --beam-runner flink will not run"; \
	else echo "make run: no Java 17 or Maven here, so --beam-runner flink is not set up (make java flink does it)"; fi

# The Flink tests need Java 17 and Maven (Debian's packages; needs root).
java:
	command -v java >/dev/null && command -v mvn >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven)

# The run report's test opens the HTML in headless Chromium (Debian's package; needs root).
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)

# The MySQL-backed ML Metadata tests start their own MariaDB server (Debian's package; needs
# root to install, and no running service).
mariadb:
	command -v mariadbd >/dev/null || command -v mysqld >/dev/null || \
		test -x /usr/sbin/mariadbd || test -x /usr/sbin/mysqld || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server)

# The whole suite, as CI runs it (.ci/run), with the 15 slowest tests and the CPU time of the
# 10 costliest modules (what decides the time on 2 workers) listed at the end.
test: venv chromium mariadb java flink
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=15 --cpu-durations=10 \
		$(PYTEST_ARGS) tests

test-fast: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "$(FAST_MARKERS)" \
		$(PYTEST_ARGS) tests

# The tables of today's figures in README.md and BENCHMARKS.md, rendered from
# benchmarks/results/ (benchmarks/figures.py; it needs no package outside the standard library).
figures:
	$(FIGURES_PYTHON) benchmarks/figures.py

# Exits non-zero, naming each generated table that differs from its result files.
figures-check:
	$(FIGURES_PYTHON) benchmarks/figures.py --check

clean:
	rm -rf $(VENV) nmt_runs .pytest_cache
