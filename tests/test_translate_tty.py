"""`attnlab translate` at a terminal (stdin a tty, driven here through a pty) answers each line when it is entered,
before the next one is typed; a pipe keeps reading everything first and batching, and both give the same output."""

import os
import pty
import select
import subprocess
import sys
import time

import pytest

LINES = ["abc", "the quick dog", "cab"]


def read_line(fd: int, timeout: float) -> bytes:
    """One line from a pipe's file descriptor, or what came before the timeout."""
    data, deadline = b"", time.monotonic() + timeout
    while not data.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            chunk = os.read(fd, 1)
            if not chunk:
                break
            data += chunk
    return data


@pytest.mark.skipif(sys.platform == "win32", reason="no pty")
def test_each_typed_line_is_answered_before_the_next(tiny_runs):
    run = str(tiny_runs["rnn"])
    piped = subprocess.run([sys.executable, "-m", "attnlab", "translate", run, "--device", "cpu"],
                           input="".join(line + "\n" for line in LINES), capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    expected = piped.stdout.splitlines()
    assert len(expected) == len(LINES)

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "translate", run, "--device", "cpu"], stdin=slave,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    os.close(slave)
    try:
        answers = []
        for line in LINES:
            os.write(master, line.encode() + b"\n")  # typed; the next line is not typed before this one's answer
            answers.append(read_line(proc.stdout.fileno(), timeout=60).decode())
            assert answers[-1].endswith("\n"), f"no answer to {line!r} while the terminal stays open"
        os.write(master, b"\x04")  # Ctrl-D at the start of a line: end of input
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(master)
    assert [a.rstrip("\n") for a in answers] == expected
