"""Two hosts on one machine: network namespaces "robot" and "inference" joined by a veth pair.

Each namespace has its own interfaces, routes and firewall, so a process started in one (`popen`)
reaches the other only over the veth pair, like two computers on a cable: DDS discovery by
multicast (239.255.0.1, routed onto the pair), every topic over UDP (config/fastdds_two_hosts.xml:
no shared memory, which the namespaces would otherwise still share through /dev/shm). Traffic
stays inside the two namespaces.

The link is shaped in the kernel with what this machine's kernel has (no netem, fq, red or
classifiers): the rate with a token bucket (`tc ... tbf`) on each end's egress, random loss with an
nftables rule (`numgen random mod 100 < N drop`) on each namespace's output, a cut with
`ip link set ... down` on the inference end (the GPU box's cable pulled). Added latency cannot be
made in-kernel here: the pair's own delay is tens of microseconds, and the design assumes a LAN
whose latency (well under a control period) adds to each chunk's age like compute time does.

Needs root (CAP_NET_ADMIN). Every name carries a tag unique to this process and instance, and
`close` (or leaving the `with` block) removes the namespaces, the pair with them.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Sequence

HOSTS = ("robot", "inference")
ADDRESSES = {"robot": "10.77.0.1", "inference": "10.77.0.2"}
PREFIX_LENGTH = 24
MULTICAST = "224.0.0.0/4"  # DDS discovery (SPDP) goes to 239.255.0.1
QUEUE_LATENCY_MS = 100  # tbf: longest a packet waits in the shaper's queue before it is dropped
_instances = itertools.count()


@dataclass(frozen=True)
class LinkShape:
    rate_mbit: float | None = None  # None: the pair's own rate (several Gbit/s)
    loss_percent: int = 0  # random loss on each direction, whole percent (nftables numgen)

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and not self.rate_mbit > 0:
            raise ValueError(f"rate_mbit must be positive, got {self.rate_mbit}")
        if not 0 <= self.loss_percent < 100:
            raise ValueError(f"loss_percent must be 0 to 99, got {self.loss_percent}")

    def describe(self) -> str:
        rate = "unshaped" if self.rate_mbit is None else f"{self.rate_mbit:g} Mbit/s"
        return rate + (f", {self.loss_percent}% loss" if self.loss_percent else "")


class TwoHosts:
    def __init__(self, tag: str | None = None):
        self.tag = tag or f"er{os.getpid() % 100000}x{next(_instances)}"
        if len(self.tag) > 12:
            raise ValueError(f"tag {self.tag!r} is longer than 12 characters (interface names have 15)")
        self.namespaces = {host: f"{self.tag}-{host}" for host in HOSTS}
        self.interfaces = {host: f"{self.tag}{host[0]}" for host in HOSTS}
        self.shape = LinkShape()
        self.created = False

    # the pair -------------------------------------------------------------------------------------

    def create(self) -> "TwoHosts":
        try:
            for namespace in self.namespaces.values():
                _run("ip", "netns", "add", namespace)
            self.created = True
            robot, inference = self.interfaces["robot"], self.interfaces["inference"]
            _run("ip", "link", "add", robot, "type", "veth", "peer", "name", inference)
            for host in HOSTS:
                _run("ip", "link", "set", self.interfaces[host], "netns", self.namespaces[host])
                self.ip(host, "addr", "add", f"{ADDRESSES[host]}/{PREFIX_LENGTH}", "dev", self.interfaces[host])
                self.ip(host, "link", "set", "lo", "up")
                self._bring_up(host)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Remove both namespaces (and with them the pair, its shaping and rules); idempotent."""
        if not self.created:
            return
        for namespace in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        self.created = False

    def __enter__(self) -> "TwoHosts":
        return self.create()

    def __exit__(self, *exc) -> None:
        self.close()

    # running in a host ----------------------------------------------------------------------------

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """`argv` run inside `host`'s namespace (`ip netns exec` execs it: same process id)."""
        return ["ip", "netns", "exec", self.namespaces[host], *argv]

    def popen(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def ip(self, host: str, *arguments: str) -> None:
        _run("ip", "-n", self.namespaces[host], *arguments)

    # shaping and faults ---------------------------------------------------------------------------

    def set_shape(self, shape: LinkShape) -> None:
        """Rate on both ends' egress (tbf), random loss on both namespaces' output (nftables)."""
        for host in HOSTS:
            self._set_rate(host, shape.rate_mbit)
            self._set_loss(host, shape.loss_percent)
        self.shape = shape

    def cut(self) -> None:
        """The link down: the inference end's interface goes down, the robot's loses its carrier."""
        self.ip("inference", "link", "set", self.interfaces["inference"], "down")

    def heal(self) -> None:
        """The link back, with its routes (taking an interface down drops the routes through it)."""
        self._bring_up("inference")

    def link_bytes(self) -> dict[str, int]:
        """Bytes each host has sent on the link so far (its interface's transmit counter)."""
        return {host: self._tx_bytes(host) for host in HOSTS}

    # internals ------------------------------------------------------------------------------------

    def _bring_up(self, host: str) -> None:
        interface = self.interfaces[host]
        self.ip(host, "link", "set", interface, "up")
        self.ip(host, "route", "replace", MULTICAST, "dev", interface)

    def _set_rate(self, host: str, rate_mbit: float | None) -> None:
        interface, namespace = self.interfaces[host], self.namespaces[host]
        subprocess.run(["tc", "-n", namespace, "qdisc", "del", "dev", interface, "root"], capture_output=True)
        if rate_mbit is None:
            return
        burst_bytes = max(32_000, int(rate_mbit * 1e6 / 8 / 250))  # at least what the rate sends per 4 ms tick
        _run("tc", "-n", namespace, "qdisc", "add", "dev", interface, "root", "tbf", "rate", f"{rate_mbit}mbit",
             "burst", str(burst_bytes), "latency", f"{QUEUE_LATENCY_MS}ms")

    def _set_loss(self, host: str, loss_percent: int) -> None:
        table = f"{self.tag}_loss"
        namespace = self.namespaces[host]
        subprocess.run(["ip", "netns", "exec", namespace, "nft", "delete", "table", "inet", table],
                       capture_output=True)
        if not loss_percent:
            return
        if shutil.which("nft") is None:
            raise RuntimeError("random loss on the link needs nftables' nft (as root: apt-get install nftables; "
                               "./setup.sh installs it)")
        rules = (f"table inet {table} {{\n chain output {{\n  type filter hook output priority 0; policy accept;\n"
                 f'  oifname "{self.interfaces[host]}" numgen random mod 100 < {loss_percent} drop\n }}\n}}\n')
        _run("ip", "netns", "exec", namespace, "nft", "-f", "-", stdin=rules)

    def _tx_bytes(self, host: str) -> int:
        shown = subprocess.run(["ip", "-n", self.namespaces[host], "-j", "-s", "link", "show", "dev",
                                self.interfaces[host]], capture_output=True, text=True, check=True)
        return int(json.loads(shown.stdout)[0]["stats64"]["tx"]["bytes"])


def _run(*argv: str, stdin: str | None = None) -> None:
    finished = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if finished.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({finished.returncode}): {finished.stderr.strip()}")
