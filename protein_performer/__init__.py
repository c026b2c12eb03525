"""protein-performer: Performer (FAVOR+) protein language models and attention analysis."""

__version__ = "0.1.0"
