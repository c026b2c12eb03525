"""Helpers every room uses: atomic writes, output checks, progress, interrupts, devices and the
project's packaged files. Imports nothing else of the package except :mod:`protein_performer.errors`."""
