"""Fabric drivers: attach/detach devices (emulated by default)."""
