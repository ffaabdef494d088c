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


#: The policies that run the multi-phase flow (`FlowPlacer`), whose rounds make passes (`max_iterations`).
FLOW_POLICIES: dict[str, type[DRMaestroPolicy]] = {
    name: f for name, f in POLICIES.items() if isinstance(f, type) and issubclass(f, DRMaestroPolicy)}


def get_policy(name: str, max_iterations: int | None = None) -> Policy:
    """A fresh policy object by name; `max_iterations` (flow policies only): the passes a round may make."""
    if name not in POLICIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    if max_iterations is None:
        return POLICIES[name]()
    if name not in FLOW_POLICIES:
        raise ValueError(f"max_iterations applies only to the flow policies ({', '.join(FLOW_POLICIES)}), "
                         f"not to {name!r}")
    return FLOW_POLICIES[name](max_iterations)
