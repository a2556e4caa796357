"""Kiln's errors as Python exceptions: kiln.Error (a RuntimeError) and its kinds, each also the
builtin exception a Python user would catch, with the C++ message unchanged."""
import os
import signal
import subprocess
import sys
import textwrap
import time

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


def test_ctrl_c_interrupts_a_compile_waiting_for_the_cxx_compiler(tmp_path):
    # A C++ compiler that never finishes (it records its pid first): Ctrl-C during the compile
    # raises KeyboardInterrupt at once, and the compiler's process is gone after it.
    fake = tmp_path / "slow-cxx"
    pid_file = tmp_path / "compiler.pid"
    fake.write_text(f"""#!/bin/sh
case "$1" in --version) echo "slow-cxx 1.0"; exit 0;; esac
echo $$ > {pid_file}
exec sleep 300
""")
    fake.chmod(0o755)
    script = textwrap.dedent("""
        import sys, time, kiln
        f = kiln.compile(lambda x: (x.sin() * 2).exp(), backend="inductor")
        start = time.monotonic()
        try:
            print("compiling", flush=True)
            f(kiln.ones(8))
        except KeyboardInterrupt:
            print(f"interrupted after {time.monotonic() - start:.1f} s", flush=True)
            sys.exit(3)
    """)
    env = dict(os.environ, CXX=str(fake), KILN_CACHE_DIR=str(tmp_path / "cache"))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             env=env)
    try:
        assert child.stdout.readline().strip() == "compiling"
        for _ in range(200):  # until the compiler runs
            if pid_file.exists() and pid_file.read_text().strip():
                break
            time.sleep(0.05)
        assert pid_file.exists(), "the fake compiler never started"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 3 and "interrupted after" in out, out
    compiler = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(compiler, 0)
