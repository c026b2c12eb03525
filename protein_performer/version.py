"""The package's version (pyproject.toml's), importable without the package's other modules."""

__version__ = "0.1.0"
