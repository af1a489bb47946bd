"""Errors as safetensors raises them: every error the package raises is a weightmap.Error, and
where safetensors is installed a safetensors.SafetensorError too (checked here with a stand-in
package in a child process, and in-process against the real one where it is installed, as on
the GPU machine); NumPy get_slice indexes as safetensors' own indexer does, with its words
("Invalid index -6 for dimension 1 of size 5"), and reads only the rows asked for; a missing
file's message is safetensors' ("No such file or directory: notafile").
"""
import json
import os
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import weightmap
from conftest import check_nothing_held

A = np.arange(50, dtype=np.float64).reshape(10, 5) / 7


def write_st(path, tensors):
    """A safetensors file of NumPy arrays, written by hand (safetensors may not be installed)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {"float64": "F64", "float32": "F32"}[str(a.dtype)],
                        "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fp:
        fp.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return str(path)


@pytest.fixture
def slice_file(tmp_path):
    return write_st(tmp_path / "slice.safetensors", {"a": A})


# ---- NumPy slices: safetensors' indexer -------------------------------------------------------

GOOD = [np.s_[:], np.s_[()], np.s_[:2], np.s_[:, :2], np.s_[0, :2], np.s_[2:, 0], np.s_[2:, 1],
        np.s_[2:, -1], np.s_[2:, -5], np.s_[-3], np.s_[1:9:3], np.s_[..., 1], np.s_[None, 3],
        np.s_[-4:], np.s_[3:3], np.s_[10:]]


@pytest.mark.parametrize("mode", ["mmap-private", "heap"])
def test_numpy_slices_take_what_safetensors_takes(slice_file, mode):
    with weightmap.safe_open(slice_file, framework="np", mode=mode) as f:
        s = f.get_slice("a")
        for index in GOOD:
            got = s[index]
            assert got.shape == A[index].shape and np.array_equal(got, A[index]), index
        empty = s[[]]                                 # safetensors: no rows
        assert empty.shape == (0, 5)
        del got, empty


@pytest.mark.parametrize("index,words", [
    (np.s_[2:, -6], "Invalid index -6 for dimension 1 of size 5"),
    (np.s_[-11], "Invalid index -11 for dimension 0 of size 10"),
    ([0, 1], "Non empty lists are not implemented"),
    (np.s_[2:, 20], "Error during slicing [2:, 20] with shape [10, 5]: index 20 out of bounds "
                    "for tensor dimension #1 of size 5"),
    (np.s_[:20], "Error during slicing [:20] with shape [10, 5]: index 19 out of bounds for "
                 "tensor dimension #0 of size 10"),
    (np.s_[:, :20], "Error during slicing [:, :20] with shape [10, 5]: index 19 out of bounds "
                    "for tensor dimension #1 of size 5"),
    (np.s_[10], "Error during slicing [10] with shape [10, 5]: index 10 out of bounds for "
                "tensor dimension #0 of size 10"),
    (np.s_[0, 0, 0], "Error during slicing [0, 0, 0] with shape [10, 5]: more slicing indexes "
                     "than dimensions in tensor"),
])
def test_numpy_slice_errors_in_safetensors_words(slice_file, index, words):
    with weightmap.safe_open(slice_file, framework="np", mode="heap") as f:
        with pytest.raises(weightmap.SliceError) as e:
            f.get_slice("a")[index]
        assert str(e.value) == words
        assert isinstance(e.value, IndexError) and isinstance(e.value, weightmap.SafetensorError)
        assert not f._h.loaded                        # refused before anything was read


def rows_read(f, index):
    before = weightmap.ledger()["heap"]["current"]
    with open("/proc/self/io", "rb", buffering=0) as fp:
        t0 = fp.read(4096)
    r0 = int(next(l for l in t0.split(b"\n") if l.startswith(b"rchar:")).split()[1])
    got = f.get_slice("a")[index]
    with open("/proc/self/io", "rb", buffering=0) as fp:
        t1 = fp.read(4096)
    r1 = int(next(l for l in t1.split(b"\n") if l.startswith(b"rchar:")).split()[1])
    return got, r1 - r0 - len(t0), weightmap.ledger()["heap"]["current"] - before


def test_numpy_slice_reads_only_its_rows(tmp_path):
    """Heap mode: get_slice(name)[rows] reads exactly those rows' bytes (the kernel's rchar)
    and holds them, not the tensor."""
    big = np.arange(4096 * 64, dtype=np.float32).reshape(4096, 64)
    path = write_st(tmp_path / "big.safetensors", {"a": big})
    row = 64 * 4
    with weightmap.safe_open(path, framework="np", mode="heap", threads=2) as f:
        for index, n_rows in ((np.s_[100:103], 3), (np.s_[7], 1), (np.s_[-2:, 5], 2),
                              (np.s_[10:20:5], 6)):
            got, read, held = rows_read(f, index)
            assert np.array_equal(got, big[index]), index
            assert read == n_rows * row, (index, read)
            assert n_rows * row <= held < n_rows * row + (64 << 10), (index, held)
            del got
        assert not f._h.loaded
    check_nothing_held()


def test_torch_slice_errors_are_weightmap_errors(slice_file):
    """pt indexes as torch does, with torch's words; its errors are also weightmap.Errors (so
    `except SafetensorError` catches them) and keep their builtin class."""
    with weightmap.safe_open(slice_file, framework="pt") as f:
        s = f.get_slice("a")
        assert torch.equal(s[2:, -5], torch.from_numpy(A)[2:, -5])
        with pytest.raises(weightmap.SliceError, match="out of bounds") as e:
            s[2:, 20]
        assert isinstance(e.value, IndexError)
        with pytest.raises(weightmap.ArgumentError, match="step"):
            s[::-1]


# ---- every error is a SafetensorError where safetensors is installed -------------------------

CHILD = textwrap.dedent("""
    import sys, safetensors, weightmap
    assert weightmap._c.ERROR_IS_SAFETENSORS == 1
    assert issubclass(weightmap.Error, safetensors.SafetensorError)
    path, missing = sys.argv[1], sys.argv[2]
    caught = []
    def expect(fn, cls):
        try:
            fn()
        except safetensors.SafetensorError as e:
            assert isinstance(e, cls), (type(e), cls)
            caught.append(type(e).__name__)
        else:
            raise AssertionError("no error")
    with weightmap.safe_open(path, framework="np") as f:
        pass
    expect(lambda: f.keys(), ValueError)                          # after close()
    expect(lambda: weightmap.safe_open(missing), FileNotFoundError)
    expect(lambda: weightmap.safe_open(path, mode="mlock"), ValueError)
    with weightmap.safe_open(path, framework="np") as g:
        expect(lambda: g.get_slice("a")[2:, -6], IndexError)
        expect(lambda: g.get_tensor("nope"), KeyError)
    print(" ".join(caught))
""")


def test_errors_are_safetensors_errors_with_safetensors_installed(slice_file, tmp_path):
    """In a child process where `safetensors` is importable (a stand-in package defining
    SafetensorError, as safetensors' own module does), weightmap.Error subclasses it: an error
    after close(), a missing file, a bad argument, a bad slice and a missing tensor are each
    caught by `except safetensors.SafetensorError` and keep their builtin class."""
    fake = tmp_path / "fake" / "safetensors"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("class SafetensorError(Exception):\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "fake")] +
                                                      sys.path))
    out = subprocess.run([sys.executable, "-c", CHILD, slice_file, str(tmp_path / "notafile")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ClosedError", "NotFoundError", "ArgumentError", "SliceError",
                                  "TensorNotFoundError"]


def test_errors_without_safetensors():
    """Where safetensors is not importable, Error is an Exception of its own (and the tests of
    the real one below skip)."""
    try:
        import safetensors  # noqa: F401
    except ImportError:
        assert weightmap._c.ERROR_IS_SAFETENSORS == 0
        assert weightmap.Error.__bases__ == (Exception,)
    else:
        assert weightmap._c.ERROR_IS_SAFETENSORS == 1


def test_real_safetensors_catches_weightmap_errors(slice_file, tmp_path, monkeypatch):
    """With the real safetensors (the GPU machine): its SafetensorError catches weightmap's
    errors, and the missing-file message and the NumPy slice errors are its own, word for word
    (the installed safetensors is the oracle)."""
    safetensors = pytest.importorskip("safetensors")
    assert issubclass(weightmap.Error, safetensors.SafetensorError)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as theirs:
        safetensors.safe_open("notafile", framework="pt")
    with pytest.raises(safetensors.SafetensorError) as ours:
        weightmap.safe_open("notafile", framework="pt")
    assert str(ours.value) == str(theirs.value)
    with weightmap.safe_open(slice_file, framework="np") as f:
        pass
    with pytest.raises(safetensors.SafetensorError):
        f.keys()
    with weightmap.safe_open(slice_file, framework="np") as f, \
            safetensors.safe_open(slice_file, framework="np") as g:
        for index in GOOD[:9]:
            assert np.array_equal(f.get_slice("a")[index], g.get_slice("a")[index]), index
        for index in (np.s_[2:, -6], np.s_[2:, 20], np.s_[:20]):
            with pytest.raises(safetensors.SafetensorError) as a:
                g.get_slice("a")[index]
            with pytest.raises(safetensors.SafetensorError) as b:
                f.get_slice("a")[index]
            assert str(b.value) == str(a.value), index
