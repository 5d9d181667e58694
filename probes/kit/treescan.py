"""Probe: how the job's checkout differs from the pinned commit, after the agent stopped.

The judge needs two facts about the tree the probes will run in, and must not take either from git
data the agent could have rewritten (the checkout's ``.git``): which tracked files no longer hold
their pinned content, and which untracked entries sit where Python would import them from. So the
judge hands this script the pinned manifest (mode, blob id and path of every tracked file, from the
run's read-only pristine copy) and the directories the entrypoints import from; the script hashes
the files itself the way git names blobs, and lists what it was not given.

Run by the host's own ``python3`` (never the agent's interpreter), or imported by the engine when
the checkout is on its own machine. Standard library only.

Usage: python3 -I -B treescan.py REPO_DIR MANIFEST_JSON
MANIFEST_JSON: {"files": [[mode, blob_sha1, path], ...], "import_dirs": ["", "scripts", ...],
               "submodules": [gitlink path, ...]}
Prints one JSON object (its last line): {"changed": [...], "untracked": [...], "bytecode": [...],
"now": <the host's clock>}.
"""
import hashlib
import json
import os
import stat
import sys
import time

LINK_MODE = "120000"
EXEC_MODE = "100755"
IMPORTABLE_SUFFIXES = (".py", ".pyc", ".so", ".pyd", ".pth")
MAX_UNTRACKED = 2000


def blob_id(data):
    """The id git gives a blob with this content."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _file_id(path):
    digest = hashlib.sha1()
    size = os.lstat(path).st_size
    digest.update(b"blob %d\0" % size)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _crlf_id(path):
    """The blob id of the file with CRLF line ends folded, as git's eol attributes would store it."""
    with open(path, "rb") as handle:
        data = handle.read()
    return blob_id(data.replace(b"\r\n", b"\n")) if b"\r\n" in data else None


def _symlinked_parent(root, rel):
    """The first directory component of ``rel`` that is no longer a real directory, or None."""
    parts = rel.split("/")[:-1]
    current = root
    for index, part in enumerate(parts):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None  # a missing parent: the file itself is reported missing
        if not stat.S_ISDIR(mode):
            return "/".join(parts[: index + 1])
    return None


def compare(root, files):
    """Each tracked path whose entry in the tree is not the pinned one: missing, replaced, edited.
    A checkout that is itself no longer a directory is one change at path "."."""
    if os.path.islink(root) or not os.path.isdir(root):
        return [{"path": ".", "change": "replaced", "now": "not a directory"}]
    changed = []
    reported_parents = set()
    for mode, sha, rel in files:
        parent = _symlinked_parent(root, rel)
        if parent is not None:
            if parent not in reported_parents:
                reported_parents.add(parent)
                changed.append({"path": parent, "change": "replaced", "now": "not a directory"})
            changed.append({"path": rel, "change": "missing", "under": parent})
            continue
        path = os.path.join(root, rel)
        try:
            info = os.lstat(path)
        except OSError:
            changed.append({"path": rel, "change": "missing"})
            continue
        if mode == LINK_MODE:
            if not stat.S_ISLNK(info.st_mode):
                changed.append({"path": rel, "change": "replaced", "now": _kind(info.st_mode)})
            elif blob_id(os.fsencode(os.readlink(path))) != sha:
                changed.append({"path": rel, "change": "modified", "now": "symlink to another target"})
            continue
        if not stat.S_ISREG(info.st_mode):
            changed.append({"path": rel, "change": "replaced", "now": _kind(info.st_mode)})
            continue
        try:
            same = _file_id(path) == sha or _crlf_id(path) == sha
        except OSError as error:
            changed.append({"path": rel, "change": "unreadable", "now": str(error)})
            continue
        if not same:
            changed.append({"path": rel, "change": "modified", "size": info.st_size})
        elif (mode == EXEC_MODE) != bool(info.st_mode & stat.S_IXUSR):
            changed.append({"path": rel, "change": "mode", "now": oct(info.st_mode & 0o777)})
    return changed


def _kind(mode):
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory"), (stat.S_ISREG, "file")):
        if test(mode):
            return name
    return "special file"


def _holds_python(path):
    """A directory Python could import as a package: it holds a .py file or a compiled module."""
    try:
        with os.scandir(path) as entries:
            return any(entry.name.endswith(IMPORTABLE_SUFFIXES) for entry in entries)
    except OSError:
        return False


def untracked(root, files, import_dirs, submodules=()):
    """Entries in the import directories that the pinned commit does not have, with their kind. A
    submodule's path, the folders above it and what it holds are the checkout's own (git makes them)."""
    tracked = _tracked_paths(files) | _tracked_paths([(None, None, path) for path in submodules])
    found = []
    for directory in sorted(set(import_dirs)):
        base = os.path.join(root, directory) if directory else root
        try:
            entries = sorted(os.scandir(base), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            rel = directory + "/" + entry.name if directory else entry.name
            if rel in tracked or entry.name in (".git", "__pycache__") \
                    or any(rel.startswith(path + "/") for path in submodules):
                continue
            if entry.is_symlink():
                kind = "symlink"
            elif entry.is_dir():
                kind = "package" if _holds_python(entry.path) else "directory"
            elif entry.name.endswith(IMPORTABLE_SUFFIXES):
                kind = "module"
            else:
                continue
            found.append({"path": rel, "kind": kind})
            if len(found) >= MAX_UNTRACKED:
                return found
    return found


ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
SKIP_WALK = (".git", "node_modules")


def bytecode(root, tracked):
    """Untracked bytecode anywhere in the checkout (``__pycache__`` folders, stray ``.pyc`` files):
    an unchecked-hash ``.pyc`` is imported whatever its source says. Environments inside the checkout
    (a folder with ``pyvenv.cfg`` or ``conda-meta``) are the agent's env, not the repo: left alone."""
    found = []
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        if any(marker in dirs or marker in files for marker in ENV_MARKERS):
            dirs[:] = []
            continue
        keep = []
        for name in dirs:
            rel = rel_dir + "/" + name if rel_dir else name
            if name in SKIP_WALK:
                continue
            if name == "__pycache__" and rel not in tracked:
                found.append({"path": rel, "kind": "bytecode"})
                continue
            keep.append(name)
        dirs[:] = keep
        for name in files:
            rel = rel_dir + "/" + name if rel_dir else name
            if name.endswith(".pyc") and rel not in tracked:
                found.append({"path": rel, "kind": "bytecode"})
        if len(found) >= MAX_UNTRACKED:
            break
    return found


def _tracked_paths(files):
    tracked = set()
    for _, _, rel in files:
        parts = rel.split("/")
        for end in range(1, len(parts) + 1):
            tracked.add("/".join(parts[:end]))
    return tracked


def scan(root, manifest):
    files = [tuple(item) for item in manifest.get("files", [])]
    changed = compare(root, files)
    if changed[:1] == [{"path": ".", "change": "replaced", "now": "not a directory"}]:
        return {"changed": changed, "untracked": [], "bytecode": [], "now": time.time()}
    return {"changed": changed, "untracked": untracked(root, files, manifest.get("import_dirs", [""]),
                                                       manifest.get("submodules", [])),
            "bytecode": bytecode(root, _tracked_paths(files)) if manifest.get("bytecode", True) else [],
            "now": time.time()}


def main():
    root, manifest_path = sys.argv[1], sys.argv[2]
    with open(manifest_path) as handle:
        manifest = json.load(handle)
    print(json.dumps(scan(root, manifest)))


if __name__ == "__main__":
    main()
