"""The API's routes, one module per resource, in the order `create_app` includes them (the order of
the OpenAPI document's paths)."""

from disagg.api.routers import devices, history, jobs, links, machines, ops, profiles, slices, tenants, tokens

#: Every router, in the order the app includes them.
ROUTERS = (jobs.router, slices.router, machines.router, devices.router, links.router, tenants.router, tokens.router,
           profiles.router, history.router, ops.router)

__all__ = ["ROUTERS"]
