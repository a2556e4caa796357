"""Kiln's errors as Python exceptions: kiln.Error (a RuntimeError) and its kinds, each also the
builtin exception a Python user would catch, with the C++ message unchanged."""
import signal
import subprocess
import sys
import textwrap

import pytest

import kiln


def test_error_kinds_are_python_exceptions():
    assert issubclass(kiln.Error, RuntimeError)
    assert issubclass(kiln.ShapeError, kiln.Error) and issubclass(kiln.ShapeError, ValueError)
    assert issubclass(kiln.DTypeError, TypeError)
    assert issubclass(kiln.IndexError, IndexError)
    assert issubclass(kiln.NotImplementedError, NotImplementedError)
    with pytest.raises(kiln.ShapeError, match=r"\[2, 3\].*\[4\]"):
        kiln.ones(2, 3) + kiln.ones(4)
    with pytest.raises(kiln.DTypeError):
        kiln.bitwise_and(kiln.ones(2), kiln.ones(2))
    with pytest.raises(kiln.IndexError):
        kiln.ones(2).select(0, 5)


def test_python_exception_in_a_compiled_function_propagates_unchanged():
    class Mine(Exception):
        pass

    def fn(x):
        y = x * 2
        raise Mine("from the user's code")

    with pytest.raises(Mine, match="from the user's code"):
        kiln.compile(fn, backend="eager")(kiln.ones(2))
    # The abandoned capture left nothing behind: the next call works.
    assert kiln.compile(lambda x: x + 1, backend="eager")(kiln.ones(2)).tolist() == [2.0, 2.0]


def test_ctrl_c_interrupts_a_training_loop():
    script = textwrap.dedent("""
        import sys, kiln
        x = kiln.randn(256, 256)
        try:  # (announced inside the try: the interrupt may come at once)
            print("running", flush=True)
            while True:
                x = (x @ x).tanh()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "running"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 3 and "interrupted" in out
