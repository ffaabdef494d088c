"""The OData documents of the Redfish service: `$metadata` (the CSDL schemas its resources use, by DMTF's
published URIs) and the service document (`/redfish/v1/odata`, the top-level resources)."""

from __future__ import annotations

from typing import Any

#: CSDL file → the namespaces of it the service's payloads use (their versions, where one is named).
REFERENCES: dict[str, tuple[str, ...]] = {
    "ServiceRoot": ("ServiceRoot", "ServiceRoot.v1_20_0"),
    "ComputerSystemCollection": ("ComputerSystemCollection",),
    "ComputerSystem": ("ComputerSystem", "ComputerSystem.v1_27_0"),
    "ChassisCollection": ("ChassisCollection",),
    "Chassis": ("Chassis", "Chassis.v1_28_0"),
    "CompositionService": ("CompositionService", "CompositionService.v1_2_3"),
    "ResourceBlockCollection": ("ResourceBlockCollection",),
    "ResourceBlock": ("ResourceBlock", "ResourceBlock.v1_4_3"),
    "ZoneCollection": ("ZoneCollection",),
    "Zone": ("Zone", "Zone.v1_6_3"),
    "Processor": ("Processor", "Processor.v1_22_0"),
    "Memory": ("Memory", "Memory.v1_23_0"),
    "Drive": ("Drive", "Drive.v1_22_0"),
    "SessionService": ("SessionService", "SessionService.v1_2_0"),
    "SessionCollection": ("SessionCollection",),
    "Session": ("Session", "Session.v1_8_0"),
    "AccountService": ("AccountService", "AccountService.v1_18_1"),
    "ManagerAccountCollection": ("ManagerAccountCollection",),
    "ManagerAccount": ("ManagerAccount", "ManagerAccount.v1_14_1"),
    "RoleCollection": ("RoleCollection",),
    "Role": ("Role", "Role.v1_3_3"),
    "TaskService": ("TaskService", "TaskService.v1_3_0"),
    "TaskCollection": ("TaskCollection",),
    "Task": ("Task", "Task.v1_7_4"),
    "CollectionCapabilities": ("CollectionCapabilities", "CollectionCapabilities.v1_4_1"),
    "Message": ("Message", "Message.v1_3_0"),
    "RedfishExtensions": ("RedfishExtensions.v1_0_0",),
    "Resource": ("Resource", "Resource.v1_0_0"),
}
SCHEMA_BASE = "http://redfish.dmtf.org/schemas/v1"


def metadata_xml() -> str:
    """The `$metadata` document: one `edmx:Reference` per CSDL file, and the service's entity container."""
    refs = "".join(
        f'  <edmx:Reference Uri="{SCHEMA_BASE}/{name}_v1.xml">\n'
        + "".join(f'    <edmx:Include Namespace="{ns}"/>\n' for ns in spaces)
        + "  </edmx:Reference>\n"
        for name, spaces in REFERENCES.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">\n'
        + refs
        + "  <edmx:DataServices>\n"
        '    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">\n'
        '      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>\n'
        "    </Schema>\n"
        "  </edmx:DataServices>\n"
        "</edmx:Edmx>\n"
    )


#: The service document's top-level resources: (name, URI).
TOP = (("Service", "/redfish/v1/"), ("Systems", "/redfish/v1/Systems"), ("Chassis", "/redfish/v1/Chassis"),
       ("CompositionService", "/redfish/v1/CompositionService"),
       ("SessionService", "/redfish/v1/SessionService"), ("AccountService", "/redfish/v1/AccountService"),
       ("TaskService", "/redfish/v1/TaskService"), ("Sessions", "/redfish/v1/SessionService/Sessions"))


def service_document() -> dict[str, Any]:
    return {"@odata.context": "/redfish/v1/$metadata",
            "value": [{"name": name, "kind": "Singleton", "url": url} for name, url in TOP]}


__all__ = ["REFERENCES", "metadata_xml", "service_document"]
