"""Attention tests use small tensors: run them single-threaded (OpenMP spin-waiting on a
busy 2-core machine makes tiny ops orders of magnitude slower) and restore afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
