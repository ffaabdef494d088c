"""Policies by name: one table, no duplicates; configs and the CLI select by name, never by number."""

from __future__ import annotations

from disagg.placement.base import Policy, PolicyFactory
from disagg.placement.drmaestro import DRMaestroNAPolicy, DRMaestroPolicy
from disagg.placement.fifo import FifoPolicy
from disagg.placement.firmament import FirmamentPolicy
from disagg.placement.greedy import GreedyPolicy
from disagg.placement.random_remote import RandomRemotePolicy


class UnknownPolicyError(ValueError):
    """A policy name that is not registered; the message lists the known ones."""


POLICIES: dict[str, PolicyFactory] = {}


def register(name: str, factory: PolicyFactory) -> None:
    if name in POLICIES:
        raise ValueError(f"policy {name!r} is already registered")
    POLICIES[name] = factory


for _factory in (DRMaestroPolicy, DRMaestroNAPolicy, FirmamentPolicy, GreedyPolicy, RandomRemotePolicy,
                 FifoPolicy):
    register(_factory.name, _factory)


def get_policy(name: str) -> Policy:
    """A fresh policy object by name."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise UnknownPolicyError(
            f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}") from None
