"""Reference counts: no Python object and no memory leaks over many calls."""
import gc
import sys

import strata


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_no_leak_over_a_hundred_thousand_calls():
    x = strata.ones(4, requires_grad=True)
    y = strata.ones(4)
    refs = sys.getrefcount(x)

    def step():
        z = x * y + 1.0
        z.sum().backward()
        return z[1:].numpy()

    for _ in range(5_000):
        step()
    gc.collect()
    before = _rss_bytes()
    for _ in range(100_000):
        step()
    gc.collect()
    grown = _rss_bytes() - before
    assert sys.getrefcount(x) == refs
    assert grown < 8 * 1024 * 1024, f"resident memory grew by {grown} bytes over 100000 calls"
