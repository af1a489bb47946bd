"""weightmap_build: the PEP 517 build backend of the weightmap Python package (pyproject.toml).

It builds the extension weightmap._weightmap with the project's CMake (the C library statically,
then python/_weightmap.c against it: -DWM_PYTHON=ON, target wm_python) for the interpreter that
runs it, and writes the wheel itself (a zip with the package, the extension and its dist-info),
so that building needs no Python package at all: `pip install ./python` works offline in a fresh
venv, with or without the system's site packages and with or without build isolation, where
setuptools would need itself and `wheel` installed (pip's "invalid command 'bdist_wheel'").

Hooks: build_wheel, build_editable (a wheel whose .pth names the build folder's package, rebuilt
by the next install), get_requires_for_build_wheel / _editable (nothing). No build_sdist: the
package builds from its repository (the C library is the checkout around python/), so an sdist
would not build elsewhere; `python -m build --wheel` makes the wheel.

Environment: WM_BUILD_DIR, the CMake folder (default build-py/pip-cpXY-HASH in the repository,
one per interpreter installation); WM_CMAKE_ARGS, more -D options (e.g. -DWM_CUDA=OFF).
"""
import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
ROOT = os.path.dirname(HERE)
NAME = "weightmap"
SUMMARY = ("Weight files (safetensors, GGUF) for PyTorch and NumPy: explicit load modes, "
           "zero-copy DLPack views, every byte given back")


def version():
    """The project's version, from CMakeLists.txt's project() (the one place it is written)."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(weightmap VERSION ([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("weightmap_build: no version in %s/CMakeLists.txt" % ROOT)
    return m.group(1)


def tag():
    """The wheel's tag: this CPython's (cpXY-cpXY, t for a free-threaded build) and platform."""
    v = "cp%d%d" % sys.version_info[:2]
    abi = v + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (v, abi, plat)


def build_dir():
    if os.environ.get("WM_BUILD_DIR"):
        return os.path.abspath(os.environ["WM_BUILD_DIR"])
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    key = hashlib.sha256(base.encode()).hexdigest()[:8]
    return os.path.join(ROOT, "build-py", "pip-cp%d%d-%s" % (sys.version_info[:2] + (key,)))


def build_extension():
    """Builds the extension for this interpreter; returns the built package's folder."""
    out = build_dir()
    args = ["cmake", "-S", ROOT, "-B", out, "-DWM_PYTHON=ON", "-DWM_BUILD_TESTS=OFF",
            "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            "-DPython3_EXECUTABLE=" + sys.executable]
    if shutil.which("ninja") and not os.path.exists(os.path.join(out, "Makefile")):
        args += ["-G", "Ninja"]
    args += shlex.split(os.environ.get("WM_CMAKE_ARGS", ""))
    try:
        subprocess.run(args, check=True, stdout=sys.stderr)
        subprocess.run(["cmake", "--build", out, "--target", "wm_python"], check=True,
                       stdout=sys.stderr)
    except FileNotFoundError:
        raise RuntimeError("weightmap_build: cmake is not installed (Debian: apt-get install "
                           "cmake ninja-build; docs/PYTHON.md, \"Install\")") from None
    return os.path.join(out, "python", NAME)


def package_files(pkg):
    """(name in the wheel, path) of the package: its .py files and the one extension."""
    exts = [n for n in os.listdir(pkg) if n.startswith("_weightmap.") and n.endswith(".so")]
    want = sysconfig.get_config_var("EXT_SUFFIX")
    exts = [n for n in exts if n == "_weightmap" + want]
    if len(exts) != 1:
        raise RuntimeError("weightmap_build: no _weightmap%s in %s" % (want, pkg))
    src = os.path.join(HERE, NAME)
    files = [(NAME + "/" + n, os.path.join(src, n)) for n in sorted(os.listdir(src))
             if n.endswith(".py")]
    return files + [(NAME + "/" + exts[0], os.path.join(pkg, exts[0]))]


def metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.9\n"
            % (NAME, version(), SUMMARY))


def write_wheel(directory, entries):
    """Writes NAME-VERSION-TAG.whl into `directory` from (name, bytes) entries; returns its name."""
    info = "%s-%s.dist-info" % (NAME, version())
    wheel = "Wheel-Version: 1.0\nGenerator: weightmap_build\nRoot-Is-Purelib: false\nTag: %s\n" % tag()
    entries = list(entries) + [(info + "/METADATA", metadata().encode()),
                               (info + "/WHEEL", wheel.encode())]
    record = io.StringIO()
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write("%s,sha256=%s,%d\n" % (name, digest, len(data)))
    record.write(info + "/RECORD,,\n")
    entries.append((info + "/RECORD", record.getvalue().encode()))
    filename = "%s-%s-%s.whl" % (NAME, version(), tag())
    os.makedirs(directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            z.writestr(zi, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- PEP 517 ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    pkg = build_extension()
    return write_wheel(wheel_directory, [(n, _read(p)) for n, p in package_files(pkg)])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """PEP 660: the build folder's package (python/*.py copied there at each build) on sys.path
    through a .pth; `pip install -e ./python` again after a change rebuilds it."""
    pkg = build_extension()
    pth = os.path.dirname(pkg) + "\n"
    return write_wheel(wheel_directory, [("__editable__.weightmap.pth", pth.encode())])
