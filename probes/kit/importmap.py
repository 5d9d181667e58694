"""Probe: the interpreter's import map, so C0 can be judged away from the machine it runs on.

pyright resolves imports from the interpreter's search paths and the names of the files in them; it
never runs the packages. This script records exactly that on the job's host (or in its container):
what pyright would ask the interpreter (``sys.version``, ``sys.version_info``, the search paths and
``sys.prefix``), the skeleton of every search path and of the repo (directories and the names of
importable files, kept empty), and the content of the few files pyright reads when resolving (the
census files, ``py.typed`` markers, ``__init__.pyi`` stubs). Written as a gzip tar whose members are
``importmap.json`` and ``root/<absolute path>``.

Usage: python -I -B importmap.py OUT.tar.gz REPO_DIR CENSUS_LIST
(CENSUS_LIST: a file of repo-relative paths, one per line, whose content the judge needs.)
Prints one JSON line: entries written and whether the skeleton was cut at the entry limit.
"""
import io
import json
import os
import sys
import tarfile

IMPORTABLE = (".py", ".pyi", ".so", ".pyd", ".dylib")
MARKERS = ("py.typed", "pyvenv.cfg")
READ_BY_PYRIGHT = ("py.typed", "__init__.pyi")
SKIP_DIRS = ("__pycache__", ".git", ".hg", "node_modules")
MAX_ENTRIES = 1500000
MAX_KEPT_FILE = 256 * 1024


def search_paths():
    """sys.path as pyright's own query returns it: every entry but the empty one."""
    return [p for p in sys.path if p != ""]


class Skeleton(object):
    def __init__(self, archive):
        self.archive = archive
        self.seen = set()
        self.entries = 0
        self.truncated = False

    def _add(self, path, data=None, is_dir=False, always=False):
        name = "root" + os.path.abspath(path)
        if name in self.seen:
            return
        if self.entries >= MAX_ENTRIES and not always:
            self.truncated = True
            return
        self.seen.add(name)
        self.entries += 1
        info = tarfile.TarInfo(name)
        if is_dir:
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            self.archive.addfile(info)
            return
        info.mode = 0o644
        info.size = len(data or b"")
        self.archive.addfile(info, io.BytesIO(data or b""))

    def add_file(self, path, keep_content=False):
        data = None
        if keep_content:
            try:
                if os.path.getsize(path) <= MAX_KEPT_FILE:
                    with open(path, "rb") as handle:
                        data = handle.read(MAX_KEPT_FILE)
            except (OSError, IOError):
                data = None
        self._add(path, data)

    def add_content(self, path):
        """A file the judge must read whole (a census file), however large."""
        try:
            with open(path, "rb") as handle:
                self._add(path, handle.read(), always=True)
        except (OSError, IOError):
            pass

    def add_tree(self, top):
        """Directories and importable file names under `top`, following symlinks but not cycles."""
        if not os.path.isdir(top):
            return
        self._add(top, is_dir=True)
        for root, dirs, files in os.walk(top, followlinks=True):
            real_root = os.path.realpath(root)
            kept = []
            for name in dirs:
                if name in SKIP_DIRS:
                    continue
                real = os.path.realpath(os.path.join(root, name))
                if real == real_root or real_root.startswith(real + os.sep):
                    continue  # a link back up the tree
                kept.append(name)
                self._add(os.path.join(root, name), is_dir=True)
            dirs[:] = kept
            for name in files:
                if name.endswith(IMPORTABLE) or name in MARKERS:
                    self.add_file(os.path.join(root, name), keep_content=name in READ_BY_PYRIGHT)
            if self.truncated:
                return


def main(argv):
    out, repo, census_list = argv[1], os.path.abspath(argv[2]), argv[3]
    with open(census_list) as handle:
        census = [line.strip() for line in handle if line.strip()]
    paths = search_paths()
    facts = {
        "version": sys.version,
        "version_info": list(sys.version_info),
        "path": paths,
        "prefix": sys.prefix,
        "repo": repo,
    }
    with tarfile.open(out, "w:gz", compresslevel=1) as archive:
        skeleton = Skeleton(archive)
        for entry in paths:
            skeleton.add_tree(os.path.abspath(entry))
        skeleton.add_tree(repo)
        for rel in census:
            skeleton.seen.discard("root" + os.path.join(repo, rel))  # the content wins over the name
            skeleton.add_content(os.path.join(repo, rel))
        facts["entries"] = skeleton.entries
        facts["truncated"] = skeleton.truncated
        data = json.dumps(facts).encode()
        info = tarfile.TarInfo("importmap.json")
        info.size = len(data)
        info.mode = 0o644
        archive.addfile(info, io.BytesIO(data))
    print(json.dumps({"entries": facts["entries"], "truncated": facts["truncated"]}))


if __name__ == "__main__":
    main(sys.argv)
