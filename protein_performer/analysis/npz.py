"""An ``.npz`` writer that streams large arrays block by block (``np.load`` reads the result)."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np


class NpzWriter:
    """Write arrays into an ``.npz`` (deflate-compressed unless ``compress=False``).

    :meth:`add` stores a whole array; :meth:`add_blocks` stores an array of known shape from
    blocks given in C order (e.g. rows of an L×L matrix), so it is never held in memory at once.
    """

    def __init__(self, path: str | Path, *, compress: bool = True) -> None:
        mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        self._zip = zipfile.ZipFile(
            path, "w", compression=mode, compresslevel=1 if compress else None
        )

    def add(self, name: str, array: np.ndarray | str | int) -> None:
        arr = np.asarray(array)
        with self._zip.open(f"{name}.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array(fh, arr, allow_pickle=False)

    def add_blocks(
        self, name: str, shape: tuple[int, ...], dtype: np.dtype, blocks: Iterable[np.ndarray]
    ) -> None:
        """Store ``blocks`` (concatenated in C order they fill ``shape``) as one array."""
        dtype = np.dtype(dtype)
        header = {
            "descr": np.lib.format.dtype_to_descr(dtype),
            "fortran_order": False,
            "shape": shape,
        }
        expected = int(np.prod(shape)) * dtype.itemsize
        written = 0
        with self._zip.open(f"{name}.npy", "w", force_zip64=True) as fh:
            np.lib.format.write_array_header_2_0(fh, header)
            for block in blocks:
                data = np.ascontiguousarray(block, dtype=dtype)
                fh.write(data.tobytes())
                written += data.nbytes
        if written != expected:
            raise ValueError(f"{name}: blocks held {written} bytes, shape {shape} needs {expected}")

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> NpzWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
