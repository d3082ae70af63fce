"""A second "host" on this machine for the tests: a network namespace with an address of its own,
joined to this one by a veth pair (``ip netns``, iproute2; needs root).

    with network_namespace() as ns:      # skips the test if namespaces cannot be made here
        ns.host_ip, ns.ns_ip             # "10.210.X.1" (this side), "10.210.X.2" (inside)
        ns.prefix                        # ["ip", "netns", "exec", ns.name]: run a command inside
        ns.inode                         # what os.stat("/proc/self/ns/net").st_ino says inside

Everything it makes is removed on the way out, also when the test failed; a namespace a killed test
run left behind (named ``rstream-<pid>-<n>``, its pid gone) is removed the next time.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil
import pytest

_SUBNET = "10.210"
_NAME = re.compile(r"^rstream-(\d+)-(\d+)$")
_MADE = itertools.count()


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message has its command line and what it said."""


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip <args>``; its output. Raises ``NetnsError`` with ip's message if it fails and ``check``."""
    done = subprocess.run(["ip", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Namespace:
    """A network namespace and the veth pair to it: ``host_ip`` here, ``ns_ip`` inside (a /24 of their own)."""

    name: str
    host_ip: str
    ns_ip: str
    host_veth: str
    ns_veth: str

    @property
    def prefix(self) -> list[str]:
        """The words that run a command inside: ``ip netns exec <name>`` (same process, same environment)."""
        return ["ip", "netns", "exec", self.name]

    @property
    def inode(self) -> int:
        """The namespace's inode: ``os.stat('/proc/<pid>/ns/net').st_ino`` of every process inside."""
        return os.stat(f"/run/netns/{self.name}").st_ino

    def exists(self) -> bool:
        """Whether the namespace or this side of its veth pair is still there."""
        return self.name in namespaces() or bool(ip("link", "show", self.host_veth, check=False).strip())


def namespaces() -> list[str]:
    """The names of the named network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in ip("netns", "list", check=False).splitlines() if line.strip()]


def net_inode(pid: int) -> int | None:
    """The network namespace (its inode) of process ``pid``; None if it is gone."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def processes_inside(ns: Namespace) -> list[str]:
    """Every live process in namespace ``ns`` (``pid: command line``): none once a test is done with it."""
    inode, found = ns.inode, []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and net_inode(proc.pid) == inode:
            found.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])[:200]}")
    return found




def _veths(pid: int, n: int) -> tuple[str, str]:
    return f"rs{pid}-{n}h", f"rs{pid}-{n}n"  # at most 15 characters, Linux's limit for a link name


def _remove(name: str, host_veth: str) -> None:
    ip("link", "del", host_veth, check=False)  # its peer goes with it (also when the namespace went first)
    ip("netns", "del", name, check=False)


def _remove_leftovers() -> None:
    for name in namespaces():
        match = _NAME.match(name)
        if match and not psutil.pid_exists(int(match.group(1))):
            _remove(name, _veths(int(match.group(1)), int(match.group(2)))[0])


def _free_subnet(start: int) -> int:
    used = set(re.findall(rf"\b{re.escape(_SUBNET)}\.(\d+)\.", ip("-4", "-o", "addr", "show", check=False)))
    for step in range(254):
        x = (start + step) % 254 + 1
        if str(x) not in used:
            return x
    raise NetnsError(f"every {_SUBNET}.X.0/24 is in use on this machine")


def _permitted() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "making a network namespace (`ip netns add`) needs root"
    return None


@contextmanager
def network_namespace() -> Iterator[Namespace]:
    """A fresh network namespace joined to this one by a veth pair, its loopback and both ends up;
    removed (namespace and veth pair) on the way out. Skips the test if it cannot be made here."""
    why = _permitted()
    if why is not None:
        pytest.skip(f"a second host needs a network namespace: {why}")
    _remove_leftovers()
    pid, n = os.getpid(), next(_MADE)
    name = f"rstream-{pid}-{n}"
    host_veth, ns_veth = _veths(pid, n)
    x = _free_subnet(pid * 7 + n)
    ns = Namespace(name, f"{_SUBNET}.{x}.1", f"{_SUBNET}.{x}.2", host_veth, ns_veth)
    added = subprocess.run(["ip", "netns", "add", name], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30)
    if added.returncode != 0:
        if "not permitted" in added.stderr.lower() or "permission denied" in added.stderr.lower():
            pytest.skip(f"a second host needs a network namespace, and `ip netns add` is not permitted here: "
                        f"{added.stderr.strip()}")
        raise NetnsError(f"`ip netns add {name}` failed ({added.returncode}): {added.stderr.strip()}")
    try:
        ip("link", "add", host_veth, "type", "veth", "peer", "name", ns_veth)
        ip("link", "set", ns_veth, "netns", name)
        ip("addr", "add", f"{ns.host_ip}/24", "dev", host_veth)
        ip("link", "set", host_veth, "up")
        ip("-n", name, "addr", "add", f"{ns.ns_ip}/24", "dev", ns_veth)
        ip("-n", name, "link", "set", ns_veth, "up")
        ip("-n", name, "link", "set", "lo", "up")  # Spark's executors talk to their Python workers on loopback
        yield ns
    finally:
        _remove(name, host_veth)


def address_exists(address: str) -> bool:
    """Whether ``address`` is an address of this (the host's) network namespace."""
    return f" {address}/" in ip("-4", "-o", "addr", "show", check=False)
