# The two commands that matter (see README.md):
#   make demo   build the CLI (JOBS jobs: the CPU count), make the default model (512 MiB, cached
#               in build/) and check it
#   make test   the whole test suite: the C files formatted as .clang-format says (format-check),
#               the directions docs/ARCHITECTURE.md states and the 100-line limit on functions
#               (check-source), normal build, then again under ASan+UBSan (clang), the CUDA backend against the
#               mock runtime (ASan+UBSan), each fuzzer for a bounded time, the concurrency tests
#               under TSan, every build type with gcc and clang, the Python package
#               (docs/TESTING.md)
#
# Build folders: build/ (release, for use and demo), build-test/ (fault injection on),
# build-asan/ (fault injection, AddressSanitizer, UndefinedBehaviorSanitizer, LeakSanitizer),
# build-cuda-mock/ (the CUDA backend linked against tests/cuda_mock.c, ASan+UBSan), build-fuzz/
# (libFuzzer harnesses), build-tsan/ (ThreadSanitizer).

JOBS      ?= $(shell nproc)
CTEST     := ctest --output-on-failure -j$(JOBS) --timeout 900
DEMO_MODEL = build/default-model.gguf

.PHONY: docs test-docs docs-build arm64 test-arm64 darwin test-darwin check-source all deps peer ggml llama build test test-normal test-asan test-cuda-mock demo install clean bench fuzz fuzz-build test-fuzz test-tsan iq-grids test-builds format format-check python python-build test-python test-python-asan

all: build

deps:
	@scripts/deps.sh

BUILD_CONFIGURE = cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON
build: deps
	@$(BUILD_CONFIGURE) >/dev/null
	@cmake --build build -j $(JOBS)

# demo builds the CLI alone (the library and the tool: not the tests or the benchmarks), with as
# many jobs as the machine has CPUs (JOBS); then check on the default model, then a short swap of
# three small models (16 MiB each, made once beside it) through a pool whose budget holds two of
# them (a second or two).
DEMO_SWAP := $(dir $(DEMO_MODEL))swap
demo: deps
	@$(BUILD_CONFIGURE) >/dev/null
	@cmake --build build --target weightmap_cli -j $(JOBS)
	@test -f $(DEMO_MODEL) || build/weightmap make-model $(DEMO_MODEL) --size 512M
	build/weightmap demo --model $(DEMO_MODEL)
	@for s in 1 2 3; do test -f $(DEMO_SWAP)-$$s.gguf || build/weightmap make-model $(DEMO_SWAP)-$$s.gguf --size 16M --seed $$s >/dev/null; done
	build/weightmap swap $(DEMO_SWAP)-1.gguf $(DEMO_SWAP)-2.gguf $(DEMO_SWAP)-3.gguf --cycles 2 --budget 48M --threads 2

test: format-check check-source test-normal test-asan test-cuda-mock test-fuzz test-tsan test-builds test-python test-python-asan test-docs test-arm64 test-darwin

# The oracle tests (conversion and type table against llama.cpp's own ggml) need the npm peer;
# without it (no registry) they report skipped and the committed reference checksums still run.
peer:
	@scripts/peer.sh >/dev/null 2>&1 || echo "peer: llama.cpp's loader could not be installed; oracle tests will skip"
	@scripts/peer-node.sh >/dev/null 2>&1 || echo "peer: @fugood/llama.node could not be installed; its trace tests will skip"
	@scripts/peer-whisper.sh >/dev/null 2>&1 || echo "peer: @fugood/whisper.node could not be installed; its trace tests will skip"
	@scripts/peer-onnx.sh >/dev/null 2>&1 || echo "peer: onnxruntime-node could not be installed; its trace tests will skip"

# The ggml bridge (docs/GGML.md) and its tests need ggml: the peer's prebuilt ggml 0.23.0 with that
# release's headers (scripts/ggml.sh, into the npm cache outside the clone, linked as bench/peers/ggml/;
# WM_GGML=AUTO finds it there). Every npm download goes through scripts/npm-cache.sh: one folder per
# package@version in ${XDG_CACHE_HOME:-~/.cache}/weightmap/npm, so a fresh clone installs nothing twice.
ggml: peer
	@scripts/ggml.sh >/dev/null 2>&1 || echo "ggml: ggml could not be installed; the ggml bridge and its tests are not built"

# The llama.cpp bridge (docs/LLAMA.md) and its tests need llama.cpp: the peer's prebuilt llama.cpp
# v0.4.0 with that release's headers (scripts/llama.sh, into the npm cache, linked as
# bench/peers/llama/; WM_LLAMA=AUTO finds it there).
llama: peer
	@scripts/llama.sh >/dev/null 2>&1 || echo "llama: llama.cpp could not be installed; the llama.cpp bridge and its tests are not built"

TEST_CONFIGURE = cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DWM_FAULT_INJECTION=ON
test-normal: deps peer ggml llama
	@$(TEST_CONFIGURE) >/dev/null
	@cmake --build build-test
	cd build-test && $(CTEST)

test-asan: deps ggml llama
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWM_WERROR=ON -DCMAKE_C_COMPILER=clang \
	  -DWM_FAULT_INJECTION=ON -DWM_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

# The CUDA backend's logic without a GPU: the library against tests/cuda_mock.c (a host-memory
# runtime that defers copies until their event is waited for and refuses calls from any thread
# but the loading one), under ASan+UBSan. Without the CUDA toolkit's headers the backend is not
# built and the cases check the "no backend" error instead.
test-cuda-mock: deps
	@cmake -S . -B build-cuda-mock -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWM_WERROR=ON -DCMAKE_C_COMPILER=clang \
	  -DWM_FAULT_INJECTION=ON -DWM_CUDA_MOCK=ON -DWM_SANITIZE=address,undefined >/dev/null
	@cmake --build build-cuda-mock --target test_cuda test_multi test_budget weightmap_cli
	cd build-cuda-mock && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 $(CTEST) -R '^(cuda|multi)\.|^budget\.(cost_holds_for_the_cuda|pool_device_model|pool_sleep_fault|cli_swap_sleep)'

# Fuzzing (docs/TESTING.md): libFuzzer harnesses tests/fuzz/fuzz_*.c in build-fuzz/ (clang, ASan,
# UBSan, LSan). test-fuzz runs each from its corpus for FUZZ_CI_SECONDS (CI); fuzz is the long
# campaign, FUZZ_SECONDS per harness, FUZZ_PARALLEL harnesses at once, at nice 10.
FUZZ_TARGETS    := wm_fuzz_gguf wm_fuzz_safetensors wm_fuzz_index wm_fuzz_load
FUZZ_CI_SECONDS ?= 45
FUZZ_SECONDS    ?= 1800
FUZZ_PARALLEL   ?= 1
TSAN_STRESS_CYCLES ?= 50

fuzz-build: deps
	@cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DCMAKE_C_COMPILER=clang \
	  -DWM_FUZZ=ON -DWM_FAULT_INJECTION=ON -DWM_SANITIZE=address,undefined -DWM_BUILD_TESTS=OFF -DWM_BUILD_CLI=OFF >/dev/null
	@cmake --build build-fuzz --target $(FUZZ_TARGETS)

test-fuzz: fuzz-build
	FUZZ_PARALLEL=$(JOBS) tests/fuzz/run.sh build-fuzz $(FUZZ_CI_SECONDS)

fuzz: fuzz-build
	FUZZ_PARALLEL=$(FUZZ_PARALLEL) FUZZ_NICE=10 tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

# ThreadSanitizer (build-tsan/): the concurrency tests, i.e. the labels stress and model, less the
# cases that measure the kernel's page counts or mlock, which TSan's shadow memory and its
# interceptors (mlock is a no-op under TSan) make meaningless; and the CUDA backend's pipeline
# (reader threads and the loading thread) against the mock runtime, labels cuda and multi (two
# mock devices, tensor-parallel slices); and the trace
# tool's interposer hooks called from several threads (label trace_tsan, tests/trace/tsan_hooks.c);
# and the probes' ABI test (label trace_abi) with the TSan build's CLI and interposer; and the
# pool of models under a budget (label budget: its lock, several threads on one pool), less the
# cases that hold a cost against the kernel's figures and the single-threaded fault sweeps.
TSAN_EXCLUDE := ^model\.(heap_footprint_is_tensor_bytes_and_returns|lock_.*)$$|^budget\.(cost_|cli_|pool_.*fault_sweep).*
test-tsan: deps
	@cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DCMAKE_C_COMPILER=clang \
	  -DWM_FAULT_INJECTION=ON -DWM_CUDA_MOCK=ON -DWM_SANITIZE=thread >/dev/null
	@cmake --build build-tsan --target test_stress test_model test_cuda test_multi test_budget weightmap_cli wmt_trace_tsan test_trace
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 WM_STRESS_CYCLES=$(TSAN_STRESS_CYCLES) \
	  $(CTEST) -L '^(stress|model|cuda|multi|trace_tsan|trace_abi|budget)$$' -E '$(TSAN_EXCLUDE)'

# Benchmarks against llama.cpp (bench/README.md): installs the peer (npm cache) if needed,
# then runs every bench executable with its defaults; a benchmark exits 77 to say "skipped".
bench: build
	@scripts/peer.sh >/dev/null
	@for src in bench/*.c bench/gpu; do name=$$(basename $$src .c); exe=build/bench/$$name; \
	  [ -x $$exe ] || continue; echo; echo "==> $$exe" >&2; rc=0; $$exe || rc=$$?; \
	  if [ $$rc -eq 77 ]; then echo "bench/$$name: skipped"; \
	  elif [ $$rc -ne 0 ]; then echo "bench/$$name: failed (exit $$rc)" >&2; exit $$rc; fi; done

# Regenerates src/convert/iq_grids.c (the IQ codebook grids, committed) from the llama.cpp peer's
# own dequantizers; only when asked (THIRD_PARTY.md says where the data comes from).
iq-grids: deps
	@scripts/peer.sh >/dev/null
	@cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON >/dev/null
	@cmake --build build --target iq-grids

# `make install` builds build/ and installs it into PREFIX (default /usr/local), under DESTDIR when
# given (a staging root, as packagers use): `make install PREFIX=$HOME/.local`, `make install
# PREFIX=/usr DESTDIR=/tmp/pkgroot`. The installed tree is relocatable (RUNPATHs relative to
# $ORIGIN, .pc and CMake files relative to themselves): it may be moved after the install.
PREFIX  ?= /usr/local
DESTDIR ?=
install: build
	@cmake -S . -B build -DCMAKE_INSTALL_PREFIX="$(PREFIX)" >/dev/null
	DESTDIR="$(DESTDIR)" cmake --install build --prefix "$(PREFIX)"

# The Python package (python/; README.md "Python"). `make python` installs it for Debian's
# /usr/bin/python3 with pip, offline (--no-deps: no other registry), into /usr/local
# (--break-system-packages: PEP 668 refuses any pip install into the system python otherwise;
# /usr/local is the place Debian leaves to local installs). python/pyproject.toml names the
# package's own build backend (python/_build/weightmap_build.py: this CMake in build-py/, the
# static library, then python/_weightmap.c against it, and the wheel written by itself), so the
# build needs no Python package, setuptools and wheel included.
# test-python builds build-py/ and runs python/tests with pytest on that build, not an install;
# then tests/install/wheel.sh builds the wheel (pip wheel ./python, offline), installs it into
# fresh venvs and imports it there, and pip-installs ./python into venvs with and without the
# system's packages: for $(PYTHON), then for each of PYTHON_OTHERS (default: a pyenv CPython 3.9,
# the oldest the package supports, where ~/.pyenv has one; each in its own build folder).
PYTHON  ?= /usr/bin/python3
PYTHON_OTHERS ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.9.*/bin/python3))
PY_TEST_ENV = PYTHONPATH=$(CURDIR)/build-py/python WM_CLI=$(CURDIR)/build-py/weightmap PYTHONDONTWRITEBYTECODE=1
python:
	@scripts/deps.sh python
	$(PYTHON) -m pip install --no-build-isolation --no-deps --break-system-packages ./python

python-build:
	@scripts/deps.sh python
	@cmake -S . -B build-py -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DWM_PYTHON=ON \
	  -DWM_BUILD_TESTS=OFF -DPython3_EXECUTABLE=$(PYTHON) >/dev/null
	@cmake --build build-py --target wm_python weightmap_cli

test-python: python-build
	cd python/tests && $(PY_TEST_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider
	tests/install/wheel.sh $(PYTHON) $(CURDIR)/build-py
	@for py in $(PYTHON_OTHERS); do tests/install/wheel.sh $$py || exit 1; done

# The same tests on the extension and the library built with clang under ASan+UBSan
# (build-py/asan/), the sanitizer's runtime preloaded into Debian's python3 (leak detection off:
# the interpreter keeps memory of its own to the end); the CLI the tests call is build-py's.
test-python-asan: python-build
	@cmake -S . -B build-py/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DWM_WERROR=ON -DCMAKE_C_COMPILER=clang \
	  -DWM_SANITIZE=address,undefined -DWM_PYTHON=ON -DWM_BUILD_TESTS=OFF -DWM_BUILD_CLI=OFF \
	  -DPython3_EXECUTABLE=$(PYTHON) >/dev/null
	@cmake --build build-py/asan --target wm_python
	cd python/tests && $(PY_TEST_ENV) PYTHONPATH=$(CURDIR)/build-py/asan/python WM_PY_STRESS_ROUNDS=40 \
	  LD_PRELOAD=$$(clang -print-file-name=libclang_rt.asan-x86_64.so) ASAN_OPTIONS=detect_leaks=0 \
	  UBSAN_OPTIONS=print_stacktrace=1 $(PYTHON) -m pytest -q -p no:cacheprovider

# Docs that cannot drift (scripts/docrun.py says how; docs/TESTING.md "Docs that cannot drift"):
# every code block of README.md and docs/*.md marked <!-- docrun ... --> runs, its commands on
# build-test/ (`build/` in the page) and its Python on build-py/, and each command's output is
# compared with the page, the numbers that vary masked; a block with a prompt and no marker
# fails too. `make docs` writes what the commands print now into the pages (then read the diff);
# `make test-docs` (part of `make test`) fails when a page and its commands disagree. First
# tests/docs/selftest.sh checks that the checker itself fails on a drifted page.
DOCS_PAGES = README.md $(sort $(wildcard docs/*.md))
DOCS_RUN   = scripts/docrun.py --build build-test --python $(PYTHON) --pythonpath build-py/python
docs-build: deps peer ggml llama python-build
	@$(TEST_CONFIGURE) >/dev/null
	@cmake --build build-test
docs: docs-build
	$(DOCS_RUN) --write $(DOCS_PAGES)
test-docs: docs-build
	tests/docs/selftest.sh
	$(DOCS_RUN) $(DOCS_PAGES)

# AArch64 (docs/PORTING.md, docs/TESTING.md): `make arm64` cross-builds the library, the CLI and
# the tests into build-arm64/ with Debian's aarch64 toolchain (cmake/toolchain-aarch64.cmake;
# scripts/deps.sh arm64 installs it, qemu-user and libc6:arm64); `make test-arm64` runs the
# ctest suite under qemu-user, less ARM64_EXCLUDE (what qemu cannot run, TESTING.md says why),
# then checks the AArch64 CLI's `cat --as f32|f16|bf16` against llama.cpp's own dequantizers (the
# x86-64 peer, in build-test's test_convert). RelWithDebInfo with fault injection, as test-normal;
# no CUDA backend (no toolkit for the target).
ARM64_EXCLUDE := ^(meter\.other_process|meter\.cli_probe|cli\.every_command_has_help|model\.heap_cycles_leave_malloc_at_baseline|types\.table_matches_ggml|shards\.gguf_split_loads_in_llama_cpp)$$
arm64:
	@scripts/deps.sh arm64
	@cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DWM_FAULT_INJECTION=ON -DWM_CUDA=OFF \
	  -DWM_GGML=OFF >/dev/null
	@cmake --build build-arm64

test-arm64: arm64 peer
	cd build-arm64 && $(CTEST) -LE '^(trace|install|cuda|multi)$$' -E '$(ARM64_EXCLUDE)'
	@cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DWM_FAULT_INJECTION=ON >/dev/null
	@cmake --build build-test --target test_convert
	cd build-test && WM_ARM64_CLI=$(CURDIR)/build-arm64/weightmap-emu $(CTEST) -R '^convert\.arm64_cli_matches_peer$$'

# Darwin (docs/PORTING.md, docs/TESTING.md): `make darwin` cross-builds the library (static and
# dylib), the CLI and the test programs for macOS on Apple silicon (aarch64-macos, macOS 11 on)
# into build-darwin/, warnings as errors, with Zig's toolchain from npm (scripts/zig.sh installs
# it into a cache outside the clone, keyed by its version; cmake/toolchain-darwin-arm64.cmake).
# Nothing built there can run here: `make test-darwin` (a step of `make test`) runs ctest's label
# darwin, the checks of what was built (tests/darwin/check.sh: imports, objects, strings, load
# commands, read with llvm-nm and llvm-objdump). Where the toolchain cannot be had (no npm, no
# registry) both say "skipped" and why, and succeed. RelWithDebInfo with fault injection, as
# test-normal; no CUDA backend, no ggml bridge, no tracer (Linux's).
DARWIN_SKIP = echo "darwin: skipped (Zig's toolchain could not be had: the line above says why)"
darwin:
	@scripts/deps.sh
	@if zb=$$(scripts/zig.sh bin); then \
	  cmake -S . -B build-darwin -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-darwin-arm64.cmake \
	    -DWM_ZIG_BIN="$$zb" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_WERROR=ON -DWM_FAULT_INJECTION=ON \
	    -DWM_CUDA=OFF -DWM_GGML=OFF -Wno-dev >/dev/null && cmake --build build-darwin; \
	else $(DARWIN_SKIP); fi

test-darwin: darwin
	@if [ -f build-darwin/CTestTestfile.cmake ] && scripts/zig.sh >/dev/null 2>&1; then \
	  cd build-darwin && $(CTEST) -L '^darwin$$'; \
	else $(DARWIN_SKIP); fi

# The build users make (no options but the build type): Release, Debug, RelWithDebInfo and
# MinSizeRel with gcc and with clang, each with -DWM_WERROR=ON so that a warning in any fails;
# -DWM_FUZZ=ON with the tests on builds with clang and is refused at configure time with gcc.
# One folder per build under build-types/.
test-builds: deps
	JOBS=$(JOBS) tests/build_types.sh build-types

# The sources' own rules, read from the files (no build; a second or less): the layering
# docs/ARCHITECTURE.md states (scripts/check-layering.sh) and no function over 100 lines
# (scripts/check-function-size.sh).
check-source:
	@scripts/check-layering.sh
	@scripts/check-function-size.sh

# Formatting to .clang-format: `make format` rewrites every C file of the project in place;
# `make format-check` changes nothing and fails when a file differs, naming each line. The files:
# those git tracks or would track (not the ignored bench/peers/ or build folders), less the fuzz
# corpus (tests/corpus/: data, not code).
FORMAT_FILES = $(shell git ls-files -co --exclude-standard -- include src cli bridge examples tools tests bench python | grep -E '\.[ch]$$' | grep -v '^tests/corpus/')
format: deps
	clang-format -i $(FORMAT_FILES)
format-check: deps
	clang-format --dry-run -Werror $(FORMAT_FILES)

# Every build folder a target here makes (build-py/ is the Python binding's; the trace tool and
# its test programs are in every build with the CLI and the tests, build/ included).
BUILD_DIRS := build build-arm64 build-darwin build-test build-asan build-cuda-mock build-fuzz build-tsan build-types build-py
clean:
	rm -rf $(BUILD_DIRS)
