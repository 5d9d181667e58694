"""The import map a host sends back (probes/mirror.py) is hostile input: its expansion is capped and
nothing in it may land outside the mirror directory or point out of it."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tracemalloc
import zlib
from pathlib import Path

import pytest

from resenv.probes import mirror
from resenv.probes.mirror import build_mirror

FACTS = {"version": "3.11.7 (main)", "version_info": [3, 11, 7, "final", 0], "path": ["/env/lib/python3.11/site-packages"],
         "prefix": "/env", "repo": "/work/repo", "entries": 3, "truncated": False}
GIB = 2**30


def member(name: str, data: bytes = b"", **fields) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info, data


def archive(*members: tuple[tarfile.TarInfo, bytes], facts: dict | bytes | None = FACTS) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
        if facts is not None:
            raw = facts if isinstance(facts, bytes) else json.dumps(facts).encode()
            info, data = member("importmap.json", raw)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def directory(name: str) -> tuple[tarfile.TarInfo, bytes]:
    return member(name, type=tarfile.DIRTYPE, mode=0o755)


def raw_member(info: tarfile.TarInfo, data: bytes) -> bytes:
    return info.tobuf(format=tarfile.GNU_FORMAT) + data + b"\0" * (-len(data) % 512)


def bomb_archive(header: tarfile.TarInfo, expanded: int) -> bytes:
    """The facts, then a tar header followed by `expanded` zero bytes, then the end of the archive, as
    one gzip stream: gzip members concatenate, so 1 GiB of zeros is 1024 copies of one small member
    (about 1 MB in all) and never built in memory."""
    mib = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = mib.compress(b"\0" * 2**20) + mib.flush()
    facts, data = member("importmap.json", json.dumps(FACTS).encode())
    start = gzip.compress(raw_member(facts, data) + header.tobuf(format=tarfile.GNU_FORMAT))
    return start + chunk * (expanded // 2**20) + gzip.compress(b"\0" * 1024)


def files_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def test_a_recorded_map_is_mirrored(tmp_path: Path) -> None:
    data = archive(directory("root/env"), directory("root/env/lib"), member("root/env/lib/six.py"),
                   member("root/work/repo/main.py", b"import six\n"), member("root/env/lib/py.typed", b"partial\n"))
    built = build_mirror(data, tmp_path / "m")
    assert built.repo == tmp_path / "m" / "root" / "work" / "repo"
    assert (built.repo / "main.py").read_bytes() == b"import six\n"
    assert (tmp_path / "m" / "root" / "env" / "lib" / "six.py").is_file()
    answers = json.loads((tmp_path / "m" / "answers" / "search_paths.json").read_text())
    assert answers["path"] == [str(tmp_path / "m" / "root" / "env/lib/python3.11/site-packages")]


def test_a_gzip_bomb_is_refused_before_it_expands(tmp_path: Path) -> None:
    info, _ = member("root/env/lib/big.py")
    info.size = GIB
    data = bomb_archive(info, GIB)
    assert len(data) < 2 * 2**20  # about 1 MB that would expand to 1 GiB
    tracemalloc.start()
    try:
        with pytest.raises(tarfile.TarError, match="more than"):
            build_mirror(data, tmp_path / "m")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    assert sum(path.stat().st_size for path in (tmp_path / "m").rglob("*") if path.is_file()) == 0


def test_a_bomb_in_the_facts_is_refused(tmp_path: Path) -> None:
    info, _ = member("importmap.json")
    info.size = GIB
    with pytest.raises(tarfile.TarError):
        build_mirror(bomb_archive(info, 64 * 2**20), tmp_path / "m")


def test_a_huge_extended_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    info, _ = member("././@PaxHeader", type=tarfile.XHDTYPE)
    info.size = GIB
    with pytest.raises(tarfile.TarError, match="extended header"):
        build_mirror(bomb_archive(info, 64 * 2**20), tmp_path / "m")


def test_the_decompressed_stream_is_capped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mirror, "MAX_EXPANDED_BYTES", 64 * 1024)
    many = [member(f"root/env/m{i}.py") for i in range(400)]  # 400 headers: 200 kB of tar
    with pytest.raises(tarfile.TarError, match="expands to more than"):
        build_mirror(archive(*many), tmp_path / "m")


def test_the_number_of_members_is_capped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mirror, "MAX_MEMBERS", 10)
    with pytest.raises(tarfile.TarError, match="members"):
        build_mirror(archive(*[member(f"root/env/m{i}.py") for i in range(20)]), tmp_path / "m")


@pytest.mark.parametrize("name", ["root/../../escaped", "root/env/../../../escaped", "../escaped",
                                  "/tmp/escaped-absolute", "root//escaped", "elsewhere/escaped"])
def test_paths_outside_the_mirror_are_refused(tmp_path: Path, name: str) -> None:
    dest = tmp_path / "a" / "b" / "m"
    with pytest.raises(tarfile.TarError, match="outside its layout"):
        build_mirror(archive(member(name, b"pwned")), dest)
    assert not list(tmp_path.rglob("escaped*"))
    assert not Path("/tmp/escaped-absolute").exists()


def test_a_symlink_escape_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    data = archive(member("root/env/link", type=tarfile.SYMTYPE, linkname=str(outside)),
                   member("root/env/link/planted.py", b"pwned"))
    with pytest.raises(tarfile.TarError, match="not a regular file"):
        build_mirror(data, tmp_path / "m")
    assert not (outside / "planted.py").exists() and not (tmp_path / "m" / "root" / "env" / "link").exists()


def test_a_relative_symlink_is_refused_too(tmp_path: Path) -> None:
    with pytest.raises(tarfile.TarError):
        build_mirror(archive(member("root/env/up", type=tarfile.SYMTYPE, linkname="../../..")), tmp_path / "m")
    assert not (tmp_path / "m" / "root" / "env" / "up").exists()


@pytest.mark.parametrize("kind", [tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_hard_links_devices_and_fifos_are_refused(tmp_path: Path, kind: bytes) -> None:
    fields = {"type": kind, "linkname": "/etc/passwd"} if kind == tarfile.LNKTYPE else {"type": kind}
    with pytest.raises(tarfile.TarError, match="not a regular file"):
        build_mirror(archive(member("root/env/odd", **fields)), tmp_path / "m")
    assert not (tmp_path / "m" / "root" / "env" / "odd").exists()


def test_facts_that_are_not_an_object_or_nested_too_deeply_are_malformed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        build_mirror(archive(facts=b"[1, 2]"), tmp_path / "m")
    with pytest.raises(ValueError, match="nested too deeply"):
        build_mirror(archive(facts=b"[" * 100_000), tmp_path / "m")
    with pytest.raises(KeyError):
        build_mirror(archive(member("root/env/x.py"), facts=None), tmp_path / "m")


def test_not_a_gzip_is_a_tar_error(tmp_path: Path) -> None:
    with pytest.raises(tarfile.TarError):
        build_mirror(b"this is no archive", tmp_path / "m")
    with pytest.raises(tarfile.TarError):
        build_mirror(archive(member("root/env/x.py", os.urandom(5000)))[:3000], tmp_path / "m")


def test_a_recorded_path_with_dot_dots_stays_under_the_mirror() -> None:
    from resenv.probes.mirror import under

    root = Path("/mirror/root")
    for recorded in ("/../../etc", "/usr/lib/../../../../home", "//x/./../y"):
        assert root in under(root, recorded).parents
