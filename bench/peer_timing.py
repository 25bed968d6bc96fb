"""Timing shared by the Python peer scripts (vmap_peers.py, compile_peers.py)."""
import statistics
import time
import timeit


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


def timed_statement(statement, names, repetitions, min_time=0.3):
    """Median, min and max seconds per execution of `statement` (source
    text, evaluated with `names` as its globals), timed as `python -m timeit`
    times it: the statement compiled into the timing loop, so no lambda call
    and no clock read is counted per execution — what a call costs when it
    sits in a user's loop. For call-overhead figures, where a lambda and a
    clock read per call (about 0.2 us) would be most of what is measured."""
    timer = timeit.Timer(statement, globals=names)
    number, _ = timer.autorange()
    number = max(number, int(number * min_time / 0.2))
    runs = [t / number for t in timer.repeat(repeat=repetitions, number=number)]
    return statistics.median(runs), min(runs), max(runs)
