"""A FAKE of the Hugging Face Hub's HTTP API, for tests: the endpoints the real `huggingface_hub`
client calls to pin, list and download a repo, served on 127.0.0.1 (point the client at it with
``HF_ENDPOINT``, or ``endpoint=`` in process).

What it speaks, as huggingface_hub 2.x requests it (see hf_api.py: `model_info`, `_iter_repo_tree_pages`;
file_download.py: `get_hf_file_metadata`, `http_get`):

* ``GET /api/{models|datasets|spaces}/{repo}/revision/{revision}[?blobs=True]``: the repo at a
  branch or commit, ``{"id", "sha", "siblings": [{"rfilename", "size", "blobId", "lfs"}]}``.
* ``GET /api/{type}s/{repo}/tree/{revision}?recursive=...``: every file as
  ``{"type": "file", "oid", "size", "path", "lfs": {"oid", "size", "pointerSize"}}`` (one page).
* ``HEAD|GET /[datasets/|spaces/]{repo}/resolve/{revision}/{path}``: a small file answers 200 with
  ``ETag`` (its git blob id), ``X-Repo-Commit`` and ``Content-Length``; an LFS file answers 302 to the
  CDN (a second server, so another origin, where the client does not follow a HEAD) with
  ``X-Linked-Etag`` (its sha256), ``X-Linked-Size`` and ``X-Repo-Commit``.
* errors as the hub signals them: 404 with ``X-Error-Code: RepoNotFound | RevisionNotFound |
  EntryNotFound``.

`hub.refuse_downloads = 403` answers every resolve with that status (403: a gated repo without a
token; 5xx would do for an outage, but the client then retries with backoff for tens of seconds).
Requests are logged.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import unquote

from .http_files import HttpFiles, send, send_bytes

LFS_FROM = 1024  # files this large are LFS files, as on the hub (there the line is 10 MiB)
_API = re.compile(r"^/api/(models|datasets|spaces)/(?P<repo>[^/]+/[^/]+)/(?P<what>revision|tree)/(?P<rev>[^/?]+)")
_RESOLVE = re.compile(r"^/(?:(?P<type>datasets|spaces)/)?(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, bytes]
    repo_type: str = "model"
    branch: str = "main"
    commit: str = field(default="")

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(self.repo_id.encode())
            for name in sorted(self.files):
                digest.update(name.encode() + b"\0" + self.files[name])
            self.commit = digest.hexdigest()

    def entry(self, path: str) -> dict:
        data = self.files[path]
        out = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": path}
        if len(data) >= LFS_FROM:
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out


class FakeHub(HttpFiles):
    """The fake hub (see the module docstring); `cdn` serves LFS blobs from another port."""

    def __init__(self, repos: list[FakeRepo]) -> None:
        super().__init__()
        self.repos = {(repo.repo_type, repo.repo_id): repo for repo in repos}
        self.cdn = HttpFiles()
        self.refuse_downloads: int | None = None
        for repo in repos:
            for data in repo.files.values():
                self.cdn.files[f"/blobs/{hashlib.sha256(data).hexdigest()}"] = data

    def __enter__(self) -> FakeHub:
        self.cdn.__enter__()
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.cdn.__exit__(*exc)

    def respond(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        path = unquote(handler.path.split("?", 1)[0])
        if (match := _API.match(path)) and method == "GET":
            self._api(handler, match.group(1)[:-1], match.group("repo"), match.group("what"), match.group("rev"))
        elif match := _RESOLVE.match(path):
            repo_type = (match.group("type") or "models")[:-1]
            self._resolve(handler, method, repo_type, match.group("repo"), match.group("rev"), match.group("path"))
        else:
            send(handler, method, 404, b"no such route\n")

    def _find(self, handler: BaseHTTPRequestHandler, method: str, repo_type: str, repo_id: str,
              revision: str) -> FakeRepo | None:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            _error(handler, method, "RepoNotFound", f"Repository Not Found for url: {handler.path}")
            return None
        if revision not in (repo.branch, repo.commit):
            _error(handler, method, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo

    def _api(self, handler: BaseHTTPRequestHandler, repo_type: str, repo_id: str, what: str, revision: str) -> None:
        repo = self._find(handler, "GET", repo_type, repo_id, unquote(revision))
        if repo is None:
            return
        if what == "tree":
            body = [repo.entry(name) for name in sorted(repo.files)]
        else:
            siblings = []
            for name in sorted(repo.files):
                entry = repo.entry(name)
                sibling = {"rfilename": name, "size": entry["size"], "blobId": entry["oid"]}
                if "lfs" in entry:
                    sibling["lfs"] = {"sha256": entry["lfs"]["oid"], "size": entry["size"], "pointerSize": 134}
                siblings.append(sibling)
            body = {"id": repo.repo_id, "sha": repo.commit, "siblings": siblings, "private": False}
        send(handler, "GET", 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, handler: BaseHTTPRequestHandler, method: str, repo_type: str, repo_id: str,
                 revision: str, path: str) -> None:
        if self.refuse_downloads is not None:
            send(handler, method, self.refuse_downloads, b"refused\n")
            return
        repo = self._find(handler, method, repo_type, repo_id, revision)
        if repo is None:
            return
        commit = {"X-Repo-Commit": repo.commit}
        if path not in repo.files:
            _error(handler, method, "EntryNotFound", f"{path} does not exist at {revision}", commit)
            return
        entry = repo.entry(path)
        if "lfs" in entry:
            sha = entry["lfs"]["oid"]
            send(handler, method, 302, b"", commit | {
                "Location": f"{self.cdn.url}/blobs/{sha}", "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(entry["size"]), "ETag": f'"{entry["oid"]}"'})
            return
        send_bytes(handler, method, repo.files[path], commit | {"ETag": f'"{entry["oid"]}"'})


def _error(handler: BaseHTTPRequestHandler, method: str, code: str, message: str,
           headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    send(handler, method, 404, body, (headers or {}) | {"X-Error-Code": code, "X-Error-Message": message,
                                                          "Content-Type": "application/json"})
