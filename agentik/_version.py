"""The package version, a leaf module so any package can read it without
importing ``agentik`` (which imports every package)."""

__version__ = "0.1.0"
