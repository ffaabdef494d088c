"""The service's fixed resources: the service root, SessionService and its sessions, AccountService with
its accounts (one per tenant, the caller's) and its predefined roles, TaskService, CompositionService."""

from __future__ import annotations

import uuid
from typing import Any

from disagg.api.redfish.auth import SESSION_TIMEOUT_S, Session
from disagg.api.redfish.resources import BLOCKS, CHASSIS, COMPOSITION, SYSTEMS, TASKS, V1, ZONES, collection, ref

SESSIONS = f"{V1}/SessionService/Sessions"
ACCOUNTS = f"{V1}/AccountService/Accounts"
ROLES = f"{V1}/AccountService/Roles"
#: Redfish's predefined roles and their privileges: a tenant's token is an Operator's (it composes and
#: decomposes its own systems), an admin token an Administrator's.
ROLE_PRIVILEGES = {
    "Administrator": ["Login", "ConfigureManager", "ConfigureUsers", "ConfigureSelf", "ConfigureComponents"],
    "Operator": ["Login", "ConfigureSelf", "ConfigureComponents"],
    "ReadOnly": ["Login", "ConfigureSelf"],
}


def version_document() -> dict[str, str]:
    return {"v1": "/redfish/v1/"}


def service_root(service_uuid: uuid.UUID) -> dict[str, Any]:
    return {
        "@odata.id": f"{V1}/", "@odata.type": "#ServiceRoot.v1_20_0.ServiceRoot", "Id": "RootService",
        "Name": "disagg Redfish service", "RedfishVersion": "1.20.0", "UUID": str(service_uuid),
        "Product": "disagg", "Vendor": "disagg",
        "Systems": ref(SYSTEMS), "Chassis": ref(CHASSIS), "CompositionService": ref(COMPOSITION),
        "SessionService": ref(f"{V1}/SessionService"), "AccountService": ref(f"{V1}/AccountService"),
        "Tasks": ref(f"{V1}/TaskService"),
        "Links": {"Sessions": ref(SESSIONS)},
        "ProtocolFeaturesSupported": {"ExpandQuery": {"ExpandAll": False, "Levels": False, "Links": False,
                                                      "NoLinks": False},
                                      "FilterQuery": False, "SelectQuery": False, "OnlyMemberQuery": False,
                                      "ExcerptQuery": False},
    }


def composition_service() -> dict[str, Any]:
    return {"@odata.id": COMPOSITION, "@odata.type": "#CompositionService.v1_2_3.CompositionService",
            "Id": "CompositionService", "Name": "Composition service",
            "Description": "disagg's machines and devices as resource blocks, in zones per rack and per pool",
            "Status": {"State": "Enabled", "Health": "OK"}, "ServiceEnabled": True,
            "AllowOverprovisioning": False, "AllowZoneAffinity": True,
            "ResourceBlocks": ref(BLOCKS), "ResourceZones": ref(ZONES)}


def session_service() -> dict[str, Any]:
    return {"@odata.id": f"{V1}/SessionService", "@odata.type": "#SessionService.v1_2_0.SessionService",
            "Id": "SessionService", "Name": "Session service", "ServiceEnabled": True,
            "SessionTimeout": SESSION_TIMEOUT_S, "Status": {"State": "Enabled", "Health": "OK"},
            "Sessions": ref(SESSIONS)}


def session(s: Session) -> dict[str, Any]:
    return {"@odata.id": f"{SESSIONS}/{s.id}", "@odata.type": "#Session.v1_8_0.Session", "Id": s.id,
            "Name": f"session of {s.user}", "UserName": s.user, "Password": None}


def sessions(items: list[Session]) -> dict[str, Any]:
    return collection(SESSIONS, "#SessionCollection.SessionCollection", "Sessions",
                      [f"{SESSIONS}/{s.id}" for s in items])


def account_service() -> dict[str, Any]:
    return {"@odata.id": f"{V1}/AccountService", "@odata.type": "#AccountService.v1_18_1.AccountService",
            "Id": "AccountService", "Name": "Account service",
            "Description": "A user is a disagg tenant; its password is a disagg token (disagg token create).",
            "ServiceEnabled": True, "Status": {"State": "Enabled", "Health": "OK"},
            "Accounts": ref(ACCOUNTS), "Roles": ref(ROLES)}


def role_of(admin: bool) -> str:
    return "Administrator" if admin else "Operator"


def account(tenant: str, admin: bool) -> dict[str, Any]:
    return {"@odata.id": f"{ACCOUNTS}/{tenant}", "@odata.type": "#ManagerAccount.v1_14_1.ManagerAccount",
            "Id": tenant, "Name": f"tenant {tenant}", "UserName": tenant, "RoleId": role_of(admin),
            "Enabled": True, "Locked": False, "Password": None, "AccountTypes": ["Redfish"],
            "Links": {"Role": ref(f"{ROLES}/{role_of(admin)}")}}


def accounts(tenant: str) -> dict[str, Any]:
    return collection(ACCOUNTS, "#ManagerAccountCollection.ManagerAccountCollection", "Accounts",
                      [f"{ACCOUNTS}/{tenant}"])


def role(name: str) -> dict[str, Any] | None:
    if name not in ROLE_PRIVILEGES:
        return None
    return {"@odata.id": f"{ROLES}/{name}", "@odata.type": "#Role.v1_3_3.Role", "Id": name, "Name": name,
            "RoleId": name, "IsPredefined": True, "AssignedPrivileges": ROLE_PRIVILEGES[name]}


def roles() -> dict[str, Any]:
    return collection(ROLES, "#RoleCollection.RoleCollection", "Roles", [f"{ROLES}/{r}" for r in ROLE_PRIVILEGES])


def task_service() -> dict[str, Any]:
    return {"@odata.id": f"{V1}/TaskService", "@odata.type": "#TaskService.v1_3_0.TaskService",
            "Id": "TaskService", "Name": "Task service", "ServiceEnabled": True,
            "Status": {"State": "Enabled", "Health": "OK"}, "Tasks": ref(TASKS)}


__all__ = ["ACCOUNTS", "ROLES", "SESSIONS", "account", "account_service", "accounts", "composition_service",
           "role", "roles", "service_root", "session", "session_service", "sessions", "task_service",
           "version_document"]
