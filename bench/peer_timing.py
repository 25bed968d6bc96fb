"""Timing shared by the Python peer scripts (vmap_peers.py, compile_peers.py)."""
import statistics
import time


def timed(fn, repetitions, min_time=0.3):
    """Median, min and max over `repetitions` of the mean seconds per call of
    `fn` in a loop of at least `min_time` seconds (after one warm-up call,
    which also compiles a jit)."""
    fn()
    runs = []
    for _ in range(repetitions):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        runs.append(elapsed / n)
    return statistics.median(runs), min(runs), max(runs)
