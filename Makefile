# The two commands that matter (see README.md):
#   make demo   build, make the default model (512 MiB, cached in build/) and check it
#   make test   the whole test suite: normal build, then again under ASan+UBSan (clang)
#
# Build folders: build/ (release, for use and demo), build-test/ (fault injection on),
# build-asan/ (fault injection, AddressSanitizer, UndefinedBehaviorSanitizer, LeakSanitizer).

JOBS      ?= $(shell nproc)
CTEST     := ctest --output-on-failure -j$(JOBS) --timeout 900
DEMO_MODEL = build/default-model.gguf

.PHONY: all deps build test test-normal test-asan demo install clean bench fuzz

all: build

deps:
	@tools/deps.sh

build: deps
	@cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build

demo: build
	@test -f $(DEMO_MODEL) || build/weightmap make-model $(DEMO_MODEL) --size 512M
	build/weightmap demo --model $(DEMO_MODEL)

test: test-normal test-asan

test-normal: deps
	@cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWM_FAULT_INJECTION=ON >/dev/null
	@cmake --build build-test
	cd build-test && $(CTEST)

test-asan: deps
	@cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	  -DWM_FAULT_INJECTION=ON -DWM_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

# Benchmarks against llama.cpp (bench/README.md): installs the peer into bench/peers/ if needed,
# then runs every bench executable with its defaults; a benchmark exits 77 to say "skipped".
bench: build
	@bench/peer.sh >/dev/null
	@for src in bench/*.c; do name=$$(basename $$src .c); exe=build/bench/$$name; \
	  [ -x $$exe ] || continue; echo; echo "==> $$exe" >&2; rc=0; $$exe || rc=$$?; \
	  if [ $$rc -eq 77 ]; then echo "bench/$$name: skipped"; \
	  elif [ $$rc -ne 0 ]; then echo "bench/$$name: failed (exit $$rc)" >&2; exit $$rc; fi; done

install: build
	cmake --install build

clean:
	rm -rf build build-test build-asan build-tsan build-fuzz
