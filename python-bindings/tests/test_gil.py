"""The GIL is released while the compiler and the runtime work."""

import threading
import time
import zlib

import partita
from partita import Mesh


def make_models():
    # Large enough that a compile takes a good fraction of a second.
    return [partita.model("gpt", layers=24, hidden=32, heads=4, seq=8,
                          vocab=64, batch=4) for _ in range(2)]


def compile_one(m):
    m.plan(Mesh({"dp": 2, "tp": 2}), strategy="dp+megatron", train=True)


def parallel_ratio(work, args):
    """Wall time of work(a) for each a in `args` on threads of their own,
    over the wall time of the same calls one after another."""
    start = time.perf_counter()
    for a in args:
        work(a)
    serial = time.perf_counter() - start
    threads = [threading.Thread(target=work, args=(a,)) for a in args]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - start) / serial


# Tests that two Python threads compiling two models run in parallel: the
# wall time of the two on two threads over that of the two in a row. A
# machine shared with other work may not give this process two cores, so
# the bound is calibrated in the same run by a workload known to release the
# GIL (zlib.compress of a large buffer): the compile must parallelize about as
# well (on an idle machine with two cores, under 0.8). The best of three
# tries counts. (test_python_runs_during_compile checks the release itself
# independently of the cores available.)
def test_two_threads_compile_in_parallel():
    data = bytes(range(256)) * 40000
    results = []
    for _ in range(3):
        models = make_models()
        compile_one(models[0])  # warm up
        baseline = parallel_ratio(lambda n: [zlib.compress(data, 6)
                                             for _ in range(n)], [6, 6])
        ratio = parallel_ratio(compile_one, models)
        results.append((ratio, baseline))
        if ratio < max(0.8, baseline + 0.15):
            break
    assert any(r < max(0.8, b + 0.15) for r, b in results), results


# Tests that Python code runs while another thread compiles: a counter in the
# main thread keeps advancing during the compile (it could not if the
# compile held the GIL).
def test_python_runs_during_compile():
    m = make_models()[0]
    done = threading.Event()
    count = 0

    def worker():
        compile_one(m)
        done.set()

    t = threading.Thread(target=worker)
    start = time.perf_counter()
    t.start()
    time.sleep(0.01)  # let the worker enter the compiler
    while not done.is_set():
        count += 1
    t.join()
    elapsed = time.perf_counter() - start
    assert elapsed > 0.05
    assert count > 1000, (count, elapsed)


# Tests that using one model from two threads at once is safe: calls on it
# wait for each other (without holding the GIL while they wait, which could
# deadlock with a compile that returns).
def test_one_model_from_two_threads():
    m = make_models()[0]
    errors = []

    def worker():
        try:
            compile_one(m)
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    texts = set()
    while t.is_alive():
        texts.add(len(str(m)))
    t.join(timeout=60)
    assert not t.is_alive() and not errors
    assert len(texts) == 1  # compiling works on a copy: the model is unchanged
