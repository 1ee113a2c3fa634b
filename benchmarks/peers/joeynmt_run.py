"""`python -m joeynmt ...` with torch's CPU threads set first: joeynmt_run.py THREADS MODE CONFIG [options].
Run by joeynmt_vs_attnlab.py with JoeyNMT's own venv (JoeyNMT itself never calls torch.set_num_threads)."""

import signal
import sys

import torch

if __name__ == "__main__":
    # A process started in the background by a shell inherits SIGINT ignored; the deadline is a SIGINT, which
    # JoeyNMT answers by saving the current weights, so the handler must be Python's own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    torch.set_num_threads(int(sys.argv[1]))
    sys.argv = ["joeynmt", *sys.argv[2:]]
    from joeynmt.__main__ import main

    main()
