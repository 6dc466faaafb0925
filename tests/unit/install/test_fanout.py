"""fan_out: at most `parallel` nodes at a time, results in the order the nodes were given."""
import threading
import time

from slurmkit.install.fanout import fan_out


def test_bounded_concurrency_and_order():
    lock = threading.Lock()
    now = peak = 0

    def work(node):
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
        time.sleep(0.02)
        with lock:
            now -= 1
        return node.upper()

    nodes = [f"n{i}" for i in range(12)]
    assert fan_out(nodes, work, 3, progress=False) == [n.upper() for n in nodes]
    assert peak == 3
    assert fan_out([], work, 3, progress=False) == []
