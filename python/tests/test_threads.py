"""Handles used from many threads at once (python/tests, `make test-python`).

32 threads on a fresh handle each round, in every mode, all asking at once for tensors, slices,
keys and metadata before anything is loaded: no error, the file's bytes, the load made once,
everything back after each round. close() while others read: each reader finishes or gets
ClosedError, nothing else, and nothing is left. WM_PY_STRESS_ROUNDS sets the rounds (200; the
ASan lane runs fewer); WM_TEST_DEVICE=cuda:0 runs the same on a GPU.
"""
import os
import threading

import pytest
import torch

import weightmap
from conftest import check_nothing_held, device_or_skip

THREADS = 32
ROUNDS = int(os.environ.get("WM_PY_STRESS_ROUNDS", "200"))


def reference(path):
    """{name: (bytes of the tensor, bytes of its rows 1:3)} from a plain heap load."""
    ref = {}
    with weightmap.safe_open(path, mode="heap") as f:
        for name, t in f.tensors():
            ref[name] = (t.contiguous().view(-1).view(torch.uint8).clone(),
                         t[1:3].contiguous().view(-1).view(torch.uint8).clone()
                         if t.dim() and t.shape[0] >= 3 else None)
        del t
    return ref


def as_bytes(t):
    return t.cpu().contiguous().view(-1).view(torch.uint8)


def reader(k, f, names, ref):
    """What thread k does on a fresh handle: one of four kinds of call, checked."""
    name = names[k % len(names)]
    kind = k % 4
    if kind == 0:
        assert torch.equal(as_bytes(f.get_tensor(name)), ref[name][0])
    elif kind == 1:
        want = ref[name][1]
        if want is not None:
            assert torch.equal(as_bytes(f.get_slice(name)[1:3]), want)
        assert torch.equal(as_bytes(f.get_slice(name)[...]), ref[name][0])
    elif kind == 2:
        assert f.keys() == sorted(ref) and f.get_slice(name).get_shape() is not None
        f.metadata()
        assert len(f.offset_keys()) == len(ref)
    else:
        got = f.get_tensors()
        assert torch.equal(as_bytes(got[name]), ref[name][0])


def run_rounds(path, mode, rounds):
    """A pool of THREADS threads; each round the main thread opens a fresh handle, the threads
    all use it at once (a barrier starts them), then it is closed and must hold nothing."""
    device = device_or_skip()
    ref = reference(path)
    names = sorted(ref)
    errors = []
    box = [None]
    start = threading.Barrier(THREADS + 1)
    done = threading.Barrier(THREADS + 1)

    def work(k):
        for _ in range(rounds):
            try:
                start.wait()
            except threading.BrokenBarrierError:
                return
            try:
                reader(k, box[0], names, ref)
            except BaseException as e:      # noqa: B902 (any failure is the test's finding)
                errors.append(f"thread {k}: {type(e).__name__}: {e}")
            try:
                done.wait()
            except threading.BrokenBarrierError:
                return

    pool = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in pool:
        t.start()
    try:
        for r in range(rounds):
            box[0] = weightmap.safe_open(path, mode=mode, device=device)
            start.wait()
            done.wait()
            assert not errors, f"round {r}: {errors[:4]}"
            box[0].close()
            assert box[0].released, f"round {r}: views left"
            box[0] = None
            assert weightmap.ledger()["bytes"] == 0
    except BaseException:
        start.abort()   # the threads stop waiting (BrokenBarrierError) and end
        done.abort()
        raise
    finally:
        for t in pool:
            t.join()
    check_nothing_held()


@pytest.mark.parametrize("mode", ["mmap-private", "mmap", "heap"])
def test_32_threads_on_a_fresh_handle(made, mode):
    run_rounds(made["safetensors"], mode, ROUNDS)


def test_32_threads_on_a_shard_set(made):
    run_rounds(made["shards"], "heap", max(1, ROUNDS // 4))


@pytest.mark.parametrize("mode", ["mmap-private", "heap"])
def test_close_while_others_read(made, mode):
    """Readers that race a close() each finish or get ClosedError (a weightmap.Error), never
    anything else; what they got stays valid; once they drop it, nothing is held."""
    device = device_or_skip()
    path = made["safetensors"]
    for _ in range(max(1, ROUNDS // 10)):
        f = weightmap.safe_open(path, mode=mode, device=device)
        names = f.keys()
        go = threading.Barrier(17)
        got, bad = [], []

        def read(k):
            go.wait()
            try:
                for j in range(8):
                    name = names[(k + j) % len(names)]
                    t = f.get_tensor(name) if j % 2 else f.get_slice(name)[:1]
                    got.append(int(as_bytes(t).sum()))
            except weightmap.ClosedError:
                pass
            except BaseException as e:      # noqa: B902
                bad.append(f"{type(e).__name__}: {e}")

        th = [threading.Thread(target=read, args=(k,)) for k in range(16)]
        for t in th:
            t.start()
        go.wait()
        f.close()
        for t in th:
            t.join()
        assert not bad, bad
        with pytest.raises(weightmap.ClosedError):
            f.get_tensor(names[0])
        assert isinstance(weightmap.ClosedError("x"), ValueError)
        del got
        check_nothing_held()
