"""jaxgrad's version (one place: the package and the strategy cache read it)."""

__version__ = "0.1.0"
