"""Run by the zygote's script in place of ``python -m <runner>`` (see ``rstream/runtime/zygote.py``).

    python -I -S launch.py <zygote socket> <real python> -m <runner module> [args...]

Standard library only, and started isolated: it must cost next to nothing. It asks the zygote for
a warm runner with this process's standard streams, environment and working directory, forwards
the signals Spark may send to it, and exits as the runner does. If the zygote cannot serve, it
becomes the real interpreter running the module: the ordinary, slower start.
"""

import json
import os
import signal
import socket
import struct
import sys


def recv_exact(conn, n):
    """Exactly ``n`` bytes from ``conn`` (EOFError if it closes first); the zygote's too."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main():
    sock_path, real, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    pid = -1
    early = []  # signals that came before the runner's pid: it gets them as soon as it has one

    def forward(signum, frame):
        if pid <= 0:
            early.append(signum)
            return
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    # from the start: a signal between the fork and these handlers would kill this process alone and
    # leave its runner behind
    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(sock_path)
        payload = json.dumps({"argv": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(payload))], [0, 1, 2])
        conn.sendall(payload)
        pid = struct.unpack("!i", recv_exact(conn, 4))[0]
    except (OSError, EOFError):
        pid = -1
    if pid <= 0:
        for sig in FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        if early:  # asked to stop before anything started: stop, as the runner would have
            os.kill(os.getpid(), early[0])
        os.execv(real, [real, *args])
    for signum in early:
        forward(signum, None)
    try:
        code = struct.unpack("!i", recv_exact(conn, 4))[0]
    except (OSError, EOFError):  # the zygote is gone: its runner must not outlive this process
        forward(signal.SIGTERM, None)
        code = 1
    if code < 0:  # killed by a signal: die of the same one, as the runner did
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
