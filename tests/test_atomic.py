"""write_atomic: a failure mid-write leaves the old file intact and no temporary files."""

from __future__ import annotations

import logging
import os
import re
import socket
import stat
import subprocess
import sys

import pytest

from protein_performer.errors import DataError
from protein_performer.utils.atomic import (
    check_writable_file,
    current_umask,
    owner_tag,
    process_alive,
    write_atomic,
    write_bytes_atomic,
    write_text_atomic,
)
from protein_performer.utils.outputs import start_staging


class _Boom(Exception):
    pass


def _failing_writer(exc: BaseException):
    def write(fh):
        fh.write(b"NEW CONTENT, partly written")
        fh.flush()
        raise exc

    return write


@pytest.mark.parametrize("exc", [_Boom("disk on fire"), KeyboardInterrupt()])
def test_failure_mid_write_keeps_the_old_file_and_leaves_no_temp_files(tmp_path, exc):
    target = tmp_path / "out.json"
    target.write_bytes(b"old content\n")
    with pytest.raises(type(exc)):
        write_atomic(target, _failing_writer(exc))
    assert target.read_bytes() == b"old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_failure_mid_write_of_a_new_file_creates_nothing(tmp_path):
    target = tmp_path / "sub" / "new.bin"
    with pytest.raises(_Boom):
        write_atomic(target, _failing_writer(_Boom()))
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_successful_write_replaces_the_file_with_plain_permissions(tmp_path):
    target = tmp_path / "out.txt"
    target.write_bytes(b"old content that is longer than the new one\n")
    old_inode = target.stat().st_ino
    write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n"
    # a new file renamed into place (readers of the old one are never disturbed)
    assert target.stat().st_ino != old_inode
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~current_umask()
    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_a_file_system_without_fsync_still_gets_its_file(tmp_path, monkeypatch):
    import errno

    from protein_performer.utils import atomic

    def no_fsync(fd):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(atomic.os, "fsync", no_fsync)
    atomic.write_text_atomic(tmp_path / "x.txt", "hello")
    assert (tmp_path / "x.txt").read_text() == "hello"

    def failing_disk(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(atomic.os, "fsync", failing_disk)
    with pytest.raises(OSError):
        atomic.write_text_atomic(tmp_path / "x.txt", "lost?")
    assert (tmp_path / "x.txt").read_text() == "hello"  # the old file stays
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_of_killed_writers_are_removed_on_the_next_write(tmp_path, caplog):
    """A run killed mid-write (SIGKILL) leaves its temporary beside the output; the next write
    of that output removes it, but never a live process's or another machine's."""
    host = owner_tag().split("~")[0]
    dead, live = _dead_pid(), os.getppid()
    out = tmp_path / "result.json"
    left = {
        "dead_file": tmp_path / f".result.json.{host}~{dead}.abc.tmp",
        "dead_dir": tmp_path / f".result.json.{host}~{dead}.tmp-xyz",
        "live_file": tmp_path / f".result.json.{host}~{live}.abc.tmp",
        "own_file": tmp_path / f".result.json.{host}~{os.getpid()}.abc.tmp",
        "other_namespace": tmp_path / f".result.json.{host.rsplit('-', 1)[0]}-1~{dead}.abc.tmp",
        "other_host": tmp_path / f".result.json.elsewhere~{dead}.abc.tmp",
        "other_output": tmp_path / f".result.json2.{host}~{dead}.abc.tmp",
        "untagged": tmp_path / ".result.json.abc.tmp",
        # a dead writer's tag, but not its temporary's shape: a user's file, never touched
        "not_a_temporary": tmp_path / f".result.json.{host}~{dead}.abc.npz",
        "folder_named_as_a_file": tmp_path / f".result.json.{host}~{dead}.xyz.tmp",
    }
    for name, p in left.items():
        if name in ("dead_dir", "folder_named_as_a_file"):
            p.mkdir()
            (p / "part.npz").write_bytes(b"x")
        else:
            p.write_bytes(b"x")
    with caplog.at_level(logging.WARNING):
        write_text_atomic(out, "{}")
    assert out.read_text() == "{}"
    assert not left["dead_file"].exists() and not left["dead_dir"].exists()
    for name in (
        "live_file",
        "own_file",
        "other_namespace",
        "other_host",
        "other_output",
        "untagged",
        "not_a_temporary",
        "folder_named_as_a_file",
    ):
        assert left[name].exists(), name
    assert f"left by an earlier run (process {dead})" in caplog.text
    # a staged output folder clears its own leftovers the same way
    stale = tmp_path / f".maps.{host}~{dead}.tmp-q1"
    stale.mkdir()
    _, work = start_staging(tmp_path / "maps")
    assert not stale.exists() and work.name.startswith(f".maps.{owner_tag()}.tmp-")


def test_a_folder_that_refuses_the_file_is_reported_under_the_outputs_name(tmp_path, monkeypatch):
    """A read-only folder (or a full disk) refuses the temporary file: the error names the
    output the user asked for, not ``.best.ckpt.HOST~PID.x.tmp``."""
    import tempfile

    def refuse(dir, prefix, suffix):
        raise PermissionError(13, "Permission denied", os.path.join(dir, prefix + "x" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError) as err:
        write_text_atomic(tmp_path / "best.ckpt", "x")
    assert err.value.filename == str(tmp_path / "best.ckpt")
    assert err.value.strerror == "Permission denied"


def test_the_umask_read_is_the_process_umask():
    old = os.umask(0o027)
    try:
        assert current_umask() == 0o027
    finally:
        os.umask(old)
    assert current_umask() == old


def test_the_owner_tag_names_this_host_and_process():
    host, pid = owner_tag().split("~")
    name = re.sub(r"[^\w.-]", "_", socket.gethostname())
    assert host.split("-")[0] == name.split("-")[0] and int(pid) == os.getpid()


def test_a_writer_is_probed_without_a_signal(monkeypatch):
    sent = []

    def kill(pid, sig):
        sent.append((pid, sig))
        if pid == 99:
            raise ProcessLookupError
        if pid == 98:
            raise PermissionError

    monkeypatch.setattr(os, "kill", kill)
    assert process_alive(12) and not process_alive(99) and process_alive(98)
    assert [s for _, s in sent] == [0, 0, 0]  # signal 0: a probe, never a signal delivered


def test_an_output_through_new_folders_is_checked_where_they_would_be_made(tmp_path):
    deep = tmp_path / "a" / "b" / "out.json"
    assert check_writable_file(deep, "out") == deep and not (tmp_path / "a").exists()
    (tmp_path / "f.txt").write_text("mine")
    with pytest.raises(DataError, match=r"out: cannot create this directory \(.*f\.txt is a file"):
        check_writable_file(tmp_path / "f.txt" / "b" / "out.json", "out")
    assert (tmp_path / "f.txt").read_text() == "mine"
