"""disagg: an orchestrator for disaggregated data centers.

The pipeline: spec → model (snapshot) → placement (policy) → actuation (sim or control) → metrics.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
