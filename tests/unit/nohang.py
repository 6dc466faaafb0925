"""One bound for the tests of parsers on hostile input: a parse that runs past `seconds` fails the test with a
TimeoutError instead of hanging the suite (SIGALRM; the main thread only)."""
import contextlib
import signal


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    def boom(*_):
        raise TimeoutError(f"ran past {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
