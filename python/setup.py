"""setup.py of the weightmap Python package: builds the extension with the project's CMake (the C
library statically, then python/_weightmap.c against it, in ../build-py/) and installs the
package. Offline and with Debian's own tools (python3-setuptools, python3-dev, libdlpack-dev,
cmake, ninja-build, pkg-config):

    /usr/bin/python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python

which `make python` runs (README.md, "Python"); into a venv `venv/bin/pip install
--no-build-isolation --no-deps ./python`, a wheel `pip wheel --no-build-isolation --no-deps -w
dist ./python` (docs/PYTHON.md). Environment: WM_BUILD_DIR (default ../build-py), WM_CMAKE_ARGS
(more -D options, e.g. -DWM_CUDA=OFF).
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.abspath(os.environ.get("WM_BUILD_DIR", os.path.join(ROOT, "build-py")))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        args = ["cmake", "-S", ROOT, "-B", BUILD, "-DWM_PYTHON=ON", "-DWM_BUILD_TESTS=OFF",
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo", f"-DPython3_EXECUTABLE={sys.executable}"]
        if shutil.which("ninja") and not os.path.exists(os.path.join(BUILD, "Makefile")):
            args += ["-G", "Ninja"]
        args += shlex.split(os.environ.get("WM_CMAKE_ARGS", ""))
        subprocess.run(args, check=True)
        subprocess.run(["cmake", "--build", BUILD, "--target", "wm_python"], check=True)
        built = os.path.join(BUILD, "python", "weightmap", os.path.basename(self.get_ext_filename(ext.name)))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built, dest)


PIP_BUILD = os.path.join(BUILD, "setuptools")
os.makedirs(PIP_BUILD, exist_ok=True)

setup(
    name="weightmap",
    version="1.6.1",
    description="Weight files (safetensors, GGUF) for PyTorch and NumPy: explicit load modes, "
                "zero-copy DLPack views, every byte given back",
    license="see the project's repository",
    packages=["weightmap"],
    ext_modules=[Extension("weightmap._weightmap", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
    # Keep setuptools' build and egg-info folders out of the source tree.
    options={"build": {"build_base": PIP_BUILD}, "egg_info": {"egg_base": PIP_BUILD}},
)
