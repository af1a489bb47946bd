#!/usr/bin/env bash
# The Python package as users install it (make test-python runs this after pytest, for Debian's
# python3 and for each other CPython it finds), offline (PIP_NO_INDEX: no registry is asked):
#  1. `pip wheel ./python` (python/pyproject.toml's own backend: no setuptools, no wheel
#     package), with build isolation and without: one wheel, named for the interpreter
#     (weightmap-VERSION-cpXY-cpXY-PLATFORM.whl), holding the package and its extension, which
#     needs only libc and libm (no libweightmap, no RUNPATH);
#  2. a fresh venv (no system packages) installs it with pip from the file alone (--no-index) and
#     imports it from outside the source tree: the ledger at 0, and safe_open saying it needs
#     numpy for framework="np" (the venv has none);
#  3. a venv over the system's packages (numpy) opens a fixture: keys, metadata, a tensor's
#     values, the ledger back at 0 (where the interpreter has numpy);
#  4. `pip install ./python` (plain, as a user types it) into a fresh venv without the system's
#     packages and into one with them builds and installs the same package.
# Usage: wheel.sh PYTHON [BUILD]   (BUILD: the CMake folder the build uses; default the
# backend's own, build-py/pip-cpXY-HASH, one per interpreter)
set -euo pipefail
py=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${2:-}" ]; then export WM_BUILD_DIR=$2; else unset WM_BUILD_DIR; fi
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "wheel: $*" >&2; exit 1; }
fixture="$src/../shared/fixtures/safetensors/hf-sample-overall.safetensors"

# 1. the wheel, with pip's build isolation (an empty build environment: nothing to fetch) and
# without (the interpreter's own packages, of which the backend needs none)
tag=$("$py" -c 'import sys, sysconfig; v = "cp%d%d" % sys.version_info[:2]; print(v + "-" + v + "-" + sysconfig.get_platform().replace("-", "_").replace(".", "_"))')
ver=$(sed -n 's/^project(weightmap VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
for iso in "" --no-build-isolation; do
  rm -rf "$tmp/dist"
  "$py" -m pip wheel $iso --no-deps -q -w "$tmp/dist" "$src/python" >"$tmp/build.log" 2>&1 \
    || { cat "$tmp/build.log" >&2; fail "pip wheel $iso ./python failed"; }
  whl="$tmp/dist/weightmap-$ver-$tag.whl"
  [ -f "$whl" ] || fail "no $(basename "$whl"); pip wrote: $(ls "$tmp/dist")"
done
"$py" - "$whl" "$tmp/x" >/dev/null <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
names = z.namelist()
ext = [n for n in names if n.startswith("weightmap/_weightmap.") and n.endswith(".so")]
assert "weightmap/__init__.py" in names and len(ext) == 1, names
z.extract(ext[0], sys.argv[2])
print(sys.argv[2] + "/" + ext[0])
PY
so=$(ls "$tmp"/x/weightmap/_weightmap.*.so)
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | paste -sd' ')
for n in $needed; do
  case "$n" in libc.so.6|libm.so.6|ld-linux*) ;; *) fail "the extension needs $n (only libc and libm expected)" ;; esac
done
if readelf -d "$so" | grep -qE 'RUNPATH|RPATH'; then fail "the extension has a RUNPATH"; fi

# 2. a fresh venv, the wheel file alone
"$py" -m venv --without-pip "$tmp/venv"
"$py" -m pip --python "$tmp/venv/bin/python" install -q --no-deps "$whl"
cd "$tmp"
"$tmp/venv/bin/python" - "$fixture" "$tmp/venv" <<'PY'
import sys, weightmap
assert weightmap.__file__.startswith(sys.argv[2]), weightmap.__file__
assert weightmap.ledger()["bytes"] == 0 and weightmap.file_regions(sys.argv[1]) == []
try:  # no numpy here: the package says what it needs for framework="np"
    weightmap.safe_open(sys.argv[1], framework="np")
    raise SystemExit("safe_open without numpy did not fail")
except ImportError as e:
    assert "numpy" in str(e), e
PY

# 3. with the system's numpy
"$py" -m venv --without-pip --system-site-packages "$tmp/venv-np"
"$py" -m pip --python "$tmp/venv-np/bin/python" install -q --no-deps "$whl"
if "$tmp/venv-np/bin/python" -c 'import numpy' 2>/dev/null; then
  "$tmp/venv-np/bin/python" - "$fixture" "$tmp/venv-np" <<'PY'
import sys, weightmap
assert weightmap.__file__.startswith(sys.argv[2]), weightmap.__file__
with weightmap.safe_open(sys.argv[1], framework="np") as f:
    assert f.keys() == ["B", "H", "I", "b", "d", "e", "f", "h", "i"], f.keys()
    assert f.metadata() == {"test": "a"}, f.metadata()
    e = f.get_tensor("e")
assert [float(x) for x in e] == [-3, -2, -1, 0, 1, 2], e
del e
assert weightmap.ledger()["bytes"] == 0
PY
fi

# 4. `pip install ./python` as a user types it, with the venv's own pip, into a fresh venv
# without the system's packages and into one with them
for site in "" --system-site-packages; do
  rm -rf "$tmp/venv-src"
  "$py" -m venv $site "$tmp/venv-src"
  (cd "$src" && "$tmp/venv-src/bin/python" -m pip install -q ./python) >"$tmp/inst.log" 2>&1 \
    || { cat "$tmp/inst.log" >&2; fail "pip install ./python into a venv ($site) failed"; }
  (cd "$tmp" && "$tmp/venv-src/bin/python" -c "import sys, weightmap; assert weightmap.__file__.startswith('$tmp/venv-src'), weightmap.__file__; assert weightmap.ledger()['bytes'] == 0")
done
echo "wheel ok ($("$py" -c 'import platform; print(platform.python_implementation(), platform.python_version())')): $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB, extension needs $needed"
