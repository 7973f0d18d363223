# Wrappers around pip and pytest. Run `make clean` between build flavours.
# TESTS: what pytest runs (default: the suite), e.g. make test-asan TESTS=tests/core/test_conn.py
PYTHON ?= python3
TESTS ?=

.PHONY: compile debug asan test test-asan test-installed bench fuzz clean

compile:
	$(PYTHON) -m pip install --no-build-isolation -e '.[test]'

debug: clean
	FASTBENCH_DEBUG=1 $(PYTHON) -m pip install --no-build-isolation -e '.[test]'

asan: clean
	FASTBENCH_ASAN=1 $(PYTHON) -m pip install --no-build-isolation -e '.[test]'

test:
	$(PYTHON) -m pytest $(TESTS)

# An ASan build must have the sanitizer runtimes loaded first; pymalloc hides heap errors.
test-asan:
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0 PYTHONMALLOC=malloc $(PYTHON) -m pytest -p no:cacheprovider $(TESTS)

test-installed:
	cd $$HOME && $(PYTHON) -m pytest $(CURDIR)/tests

bench:
	$(PYTHON) bench/bench_client.py

fuzz:
	fuzz/run.sh 60

clean:
	rm -rf build src/fastbench/_core/*.c src/fastbench/_core/*.so src/fastbench/_core/*.html *.egg-info src/*.egg-info
