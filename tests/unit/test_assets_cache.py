"""The asset cache with the real huggingface_hub client against a fake hub on loopback, and
URL assets from a loopback file server: fetched once and verified, refused when wrong, never half-kept."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from resenv.engine.assets import AssetCache, AssetError, fetch, missing_indexes, presence_script, redact_text
from resenv.engine.spec import HfAsset, UrlAsset

from ..fakes.hf_hub import FakeHub, FakeRepo
from ..fakes.http_files import HttpFiles

CONFIG = b'{"hidden": 4}\n'
WEIGHTS = bytes(range(256)) * 16  # 4 KiB: an LFS file, served from the fake CDN
DATA = b"a,b\n1,2\n" * 100


def tiny_repo() -> FakeRepo:
    return FakeRepo("org/tiny", {"config.json": CONFIG, "weights/model.bin": WEIGHTS, "README.md": b"# tiny\n"})


def hf_asset(repo: FakeRepo, files: tuple[str, ...] = ("config.json", "weights/*"), size: int | None = None,
             dest: str | None = None) -> HfAsset:
    return HfAsset(kind="hf", repo=repo.repo_id, revision=repo.commit, files=files, dest=dest,
                   size=size if size is not None else len(CONFIG) + len(WEIGHTS))


def url_asset(base: str, path: str = "/data/table.csv", sha256: str | None = None) -> UrlAsset:
    return UrlAsset(kind="url", url=base + path, size=len(DATA), sha256=sha256 or hashlib.sha256(DATA).hexdigest())


def test_hub_asset_is_cached_verified_and_a_second_fetch_asks_nothing(tmp_path):
    repo = tiny_repo()
    cache = AssetCache(tmp_path / "assets")
    lines: list[str] = []
    with FakeHub([repo]) as hub:
        asset = hf_asset(repo)
        assert not cache.is_cached(asset)
        first = fetch(asset, cache, say=lines.append, endpoint=hub.url)
        asked = len(hub.requests) + len(hub.cdn.requests)
        second = fetch(asset, cache, endpoint=hub.url)
        assert (first.status, second.status) == ("fetched", "cached")
        assert len(hub.requests) + len(hub.cdn.requests) == asked  # the no-op touched no network
    snapshot = cache.location(asset)
    assert snapshot == cache.hub / "models--org--tiny" / "snapshots" / repo.commit
    assert (snapshot / "config.json").read_bytes() == CONFIG
    assert (snapshot / "weights" / "model.bin").read_bytes() == WEIGHTS
    assert not (snapshot / "README.md").exists()  # only the files asked for
    assert (cache.hub / "models--org--tiny" / "refs" / "main").read_text() == repo.commit
    record = cache.record(asset)
    assert record is not None and set(record["files"]) == {"config.json", "weights/model.bin"}
    assert record["files"]["weights/model.bin"]["sha256"] == hashlib.sha256(WEIGHTS).hexdigest()
    assert any("weights/model.bin" in line and "verified" in line for line in lines), lines


def test_a_file_the_hub_serves_wrong_is_refused_and_not_recorded(tmp_path):
    repo = tiny_repo()
    cache = AssetCache(tmp_path / "assets")
    with FakeHub([repo]) as hub:
        blob = f"/blobs/{hashlib.sha256(WEIGHTS).hexdigest()}"
        hub.cdn.files[blob] = bytes(len(WEIGHTS))  # same size, other bytes: only a hash check notices
        with pytest.raises(AssetError, match=r"weights/model.bin: content hash .* differs from the hub's"):
            fetch(hf_asset(repo), cache, endpoint=hub.url)
    assert cache.record(hf_asset(repo)) is None and not cache.is_cached(hf_asset(repo))


@pytest.mark.parametrize("change, message", [
    ({"size": 10}, r"total 4110 bytes, the benchmark declares size 10"),
    ({"files": ("nope/*",)}, r"no file matches 'nope/\*'"),
])
def test_a_wrong_pin_is_a_clear_error_before_any_download(tmp_path, change, message):
    repo = tiny_repo()
    asset = hf_asset(repo).model_copy(update=change)
    with FakeHub([repo]) as hub:
        with pytest.raises(AssetError, match=message):
            fetch(asset, AssetCache(tmp_path / "assets"), endpoint=hub.url)
        assert not hub.cdn.requests and not any("/resolve/" in path for _, path, _ in hub.requests)


def test_unknown_revision_and_refused_downloads_are_errors_that_leave_no_record(tmp_path):
    repo = tiny_repo()
    cache = AssetCache(tmp_path / "assets")
    with FakeHub([repo]) as hub:
        with pytest.raises(AssetError, match="cannot list model org/tiny at 0000000000"):
            fetch(hf_asset(repo).model_copy(update={"revision": "0" * 40}), cache, endpoint=hub.url)
        hub.refuse_downloads = 403
        with pytest.raises(AssetError, match="config.json: .*403"):
            fetch(hf_asset(repo), cache, endpoint=hub.url)
    assert not (cache.root / "manifest").exists() or not list((cache.root / "manifest").iterdir())


def test_url_asset_is_streamed_verified_and_fetched_once(tmp_path):
    cache = AssetCache(tmp_path / "assets")
    with HttpFiles({"/data/table.csv": DATA}) as server:
        asset = url_asset(server.url)
        assert fetch(asset, cache).status == "fetched"
        assert fetch(asset, cache).status == "cached"
        assert len(server.requests) == 1
    target = cache.location(asset)
    assert target.name == "table.csv" and target.read_bytes() == DATA
    assert cache.is_cached(asset)


def test_a_wrong_sha256_is_a_clear_error_and_leaves_no_file(tmp_path):
    cache = AssetCache(tmp_path / "assets")
    with HttpFiles({"/data/table.csv": DATA}) as server:
        asset = url_asset(server.url, sha256="c" * 64)
        with pytest.raises(AssetError, match=f"declares {len(DATA)} bytes with sha256 c{{64}}; nothing was kept"):
            fetch(asset, cache)
    assert not cache.location(asset).parent.exists()
    assert not [p for p in cache.root.rglob("*") if p.is_file()]


def test_a_404_is_a_clear_error(tmp_path):
    with HttpFiles({}) as server:
        with pytest.raises(AssetError, match="HTTP 404"):
            fetch(url_asset(server.url, "/gone.bin"), AssetCache(tmp_path / "assets"))


def test_an_interrupted_url_download_resumes_with_a_range_request(tmp_path):
    cache = AssetCache(tmp_path / "assets")
    with HttpFiles({"/data/table.csv": DATA}) as server:
        asset = url_asset(server.url)
        partial = cache.location(asset).with_name("table.csv.partial")
        partial.parent.mkdir(parents=True)
        partial.write_bytes(DATA[:300])
        assert fetch(asset, cache).status == "fetched"
        assert server.requests == [("GET", "/data/table.csv", "bytes=300-")]
    assert cache.location(asset).read_bytes() == DATA and not partial.exists()


def test_presence_script_names_missing_assets_and_links_dest_ones_into_the_checkout(tmp_path):
    repo = tiny_repo()
    cache = AssetCache(tmp_path / "assets")
    with FakeHub([repo]) as hub, HttpFiles({"/data/table.csv": DATA}) as server:
        cached = [hf_asset(repo, dest="ckpt"), url_asset(server.url).model_copy(update={"dest": "data/t.csv"})]
        for asset in cached:
            fetch(asset, cache, endpoint=hub.url)
    absent = url_asset("http://127.0.0.1:9", "/never.bin", sha256="d" * 64)
    checkout = tmp_path / "repo"
    checkout.mkdir()
    script = presence_script(cache, [*cached, absent], place_into=checkout)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert missing_indexes(done.stdout) == [2]
    assert (checkout / "ckpt" / "weights" / "model.bin").read_bytes() == WEIGHTS
    assert (checkout / "ckpt" / "config.json").is_symlink()
    assert (checkout / "data" / "t.csv").read_bytes() == DATA


def test_messages_shown_to_the_user_never_carry_the_hub_token(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijkl")
    shown = redact_text("401 for http://127.0.0.1/x with Authorization: Bearer hf_abcdefghijkl")
    assert "hf_abcdefghijkl" not in shown and "REDACTED" in shown
