"""The child-process records a restart uses to stop what a killed predecessor left."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from schemas import children as kids

# The main thread ends (pthread_exit) while another thread still holds a listening socket:
# Linux then shows the process as a zombie although its files are still open, as it does for
# a SIGKILLed multi-threaded SuperLink for a moment (the cause of a failed CI run: the
# restart found the port still in use).
LEADER_GONE_THREAD_LEFT = """
import ctypes, socket, sys, threading, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
threading.Thread(target=time.sleep, args=(60,)).start()
print(listener.getsockname()[1], flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_zombie_leader_with_live_threads_still_counts_as_running() -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", LEADER_GONE_THREAD_LEFT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip().isdigit()
        proc = psutil.Process(process.pid)
        end = time.monotonic() + 10
        while proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
            time.sleep(0.02)
        assert proc.status() == psutil.STATUS_ZOMBIE  # what psutil alone reports
        assert kids._running(proc)  # its other thread (and the socket) lives on
        record = kids.child("listener", process.pid)
        assert record is not None
        assert kids.stop_orphans([record]) == [process.pid]
        assert not kids._running(proc)
    finally:
        process.kill()
        process.wait()
