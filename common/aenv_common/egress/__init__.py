"""The egress policy model shared by the gateway (validation), the node agent (nft) and the
node's egress process (names, rules, proxy): pure, no I/O.

- ``names``: domain names and patterns (``DomainPattern``).
- ``blocked``: the ranges no policy can open (``ALWAYS_BLOCKED``, ``is_blocked``).
- ``rules``: header rules, their secret placeholders, the egress proxy.
- ``policy``: ``EgressRules`` (one sandbox's policy), ``decide`` (the one decision),
  ``rules_for``, ``placeholders``.
"""

from .blocked import ALWAYS_BLOCKED, IPAddress, IPNetwork, is_blocked
from .names import DomainPattern
from .policy import (
    Decision,
    EgressRules,
    NameClass,
    Verdict,
    decide,
    placeholders,
    rules_for,
)
from .rules import EgressProxy, HeaderTransform, NetworkRule, secret_names

__all__ = [
    "ALWAYS_BLOCKED",
    "Decision",
    "DomainPattern",
    "EgressProxy",
    "EgressRules",
    "HeaderTransform",
    "IPAddress",
    "IPNetwork",
    "NameClass",
    "NetworkRule",
    "Verdict",
    "decide",
    "is_blocked",
    "placeholders",
    "rules_for",
    "secret_names",
]
