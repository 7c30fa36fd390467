"""The formal calibration job: pinned resources, pre-registered protocol, isolated fit, audit."""

__version__ = "0.1.0"
