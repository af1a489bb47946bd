"""weightmap.Pool: models under a budget (wm_pool) from Python: get/put as context managers, the
LRU eviction proven by the ledger, a buffer that keeps its use until it is released, and bad
input (put back twice, closed with a model in use, a budget below the model) named."""
import os
import shutil

import pytest

import weightmap
from conftest import fixture


def copies(tmp_path, n=3):
    src = fixture("gguf/stories260K.gguf")
    out = []
    for i in range(n):
        p = tmp_path / f"m{i}.gguf"
        shutil.copy(src, p)
        out.append(str(p))
    return out


def held_and_need(path, mode="heap"):
    with weightmap.Pool() as pool:
        with pool.get(path, mode=mode, threads=1):
            s = pool.stats()
    return s["held"], s["held_peak"]


def test_get_put_as_context_managers_evicts_least_recent(tmp_path):
    a, b, c = copies(tmp_path)
    held, need = held_and_need(a)
    with weightmap.Pool(budget=held + need + held // 2) as pool:
        for p in (a, b, a, c):
            with pool.get(p, mode="heap", threads=1) as m:
                assert m.in_use and m.mode == "heap"
                assert bytes(m.buffer(m.keys()[0])[:4])
        s = pool.stats()
        assert s["evictions"] == 1 and s["unproven"] == 0 and s["returned"] == held
        assert s["resident"] == 2 and s["hits"] == 1
        # on the CPU nothing sleeps: the wake's and the sleep's parts are there, all zero
        assert set(s["last_wake"]) == {
            "alloc_seconds", "copy_seconds", "unregister_seconds", "free_seconds", "bytes"}
        assert set(s["last_sleep"]) == {
            "seconds", "alloc_seconds", "register_seconds", "copy_seconds", "free_seconds",
            "bytes"}
        assert not any(s["last_wake"].values()) and not any(s["last_sleep"].values())
    assert weightmap.ledger()["bytes"] == 0


def test_a_buffer_keeps_its_use_until_released(tmp_path):
    a, b, _ = copies(tmp_path)
    held, need = held_and_need(a, "mmap")
    with weightmap.Pool(budget=need + held // 2) as pool:   # one model at a time
        m = pool.get(a, mode="mmap")
        view = m.buffer(m.keys()[0])
        m.put()
        assert m.in_use                      # the view holds the use
        with pytest.raises(weightmap.Error, match="in use"):
            pool.get(b, mode="mmap")         # a's room is taken: refused, nothing evicted
        assert pool.stats()["evictions"] == 0
        first = bytes(view[:8])
        del view                             # the last view: the use goes back
        assert not m.in_use
        with pool.get(b, mode="mmap") as mb:
            assert len(bytes(mb.buffer(mb.keys()[0])[:8])) == 8
        assert pool.stats()["evictions"] == 1
        assert len(first) == 8


def test_bad_input_named(tmp_path):
    a, _, _ = copies(tmp_path)
    pool = weightmap.Pool(budget=1 << 40)
    m = pool.get(a, mode="heap")
    with pytest.raises(weightmap.Error, match="in use"):
        pool.close()                         # the pool stays open
    m.put()
    with pytest.raises(weightmap.ArgumentError, match="put back twice"):
        m.put()
    with pytest.raises(weightmap.ClosedError):
        m.buffer("x")
    with pytest.raises(weightmap.FormatError, match="lfs-pointer"):
        pool.get(fixture("malformed/lfs-pointer.gguf"), mode="heap")
    pool.close()
    small = weightmap.Pool(budget=4096)
    with pytest.raises(weightmap.Error, match="budget"):
        small.get(a, mode="heap")
    small.close()
    assert weightmap.ledger()["bytes"] == 0
