"""DDS domains for tests: one per graph, distinct per test and per test process (others may run at the
same time on this machine).

Fast DDS puts a domain's ports at 7400 + 250 x domain and up; for domains 102..214 those fall in Linux's
ephemeral range (32768..60999), where any socket bound to port 0 may already hold one, and discovery then
fails at random. The tests use only the domains clear of it (1..101, 215..232; 0 is every user's default).
"""

import itertools
import os

CLEAR_DOMAINS = (*range(1, 102), *range(215, 233))

_handed_out = itertools.count()


def next_domain() -> int:
    return CLEAR_DOMAINS[(os.getpid() * 7 + next(_handed_out)) % len(CLEAR_DOMAINS)]
