"""The baseline agent's fixed rules: output limits, the folders and requirement files it skips, and
the import-name to distribution table.
"""

from __future__ import annotations

import re


# --------------------------------------------------------------------------------------------------
# constants

STREAM_LINES = 400
TAIL_CHARS = 2000
NET_TIMEOUT_S = 15
SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", "__pycache__", "node_modules", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "site-packages", ".venv", "venv", ".eggs",
    "build", "dist",
})
# requirements files named for these are not what the code needs to run
AUX_REQUIREMENTS = re.compile(r"(^|[-_.])(docs?|lint|style|format|dev|devel|tests?|ci|typing|mypy)([-_.]|$)")
VERIFY_SKIP_PACKAGES = frozenset({"test", "tests", "testing", "docs", "doc", "examples", "example",
                                  "benchmarks", "scripts"})
FRAMEWORKS = ("torch", "jax", "tensorflow")
STDLIB_EXTRA = frozenset({"__future__", "__main__"})

# import name -> distribution name (None: not installable from a package index by that name)
IMPORT_TO_DIST: dict[str, str | None] = {
    "cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image", "yaml": "PyYAML",
    "PIL": "Pillow", "bs4": "beautifulsoup4", "attr": "attrs", "Crypto": "pycryptodome",
    "Cryptodome": "pycryptodomex", "google.protobuf": "protobuf", "dateutil": "python-dateutil",
    "dotenv": "python-dotenv", "jwt": "PyJWT", "serial": "pyserial", "usb": "pyusb", "zmq": "pyzmq",
    "git": "GitPython", "github": "PyGithub", "nacl": "PyNaCl", "OpenSSL": "pyOpenSSL",
    "Bio": "biopython", "OpenGL": "PyOpenGL", "fitz": "PyMuPDF", "docx": "python-docx",
    "pptx": "python-pptx", "magic": "python-magic", "MySQLdb": "mysqlclient",
    "psycopg2": "psycopg2-binary", "Levenshtein": "levenshtein", "dns": "dnspython",
    "faiss": "faiss-cpu", "grpc": "grpcio", "pkg_resources": "setuptools", "_pytest": "pytest",
    "IPython": "ipython", "mpl_toolkits": "matplotlib", "haiku": "dm-haiku", "tree": "dm-tree",
    "sonnet": "dm-sonnet", "absl": "absl-py", "hydra": "hydra-core", "websocket": "websocket-client",
    "socks": "PySocks", "multipart": "python-multipart", "osgeo": "GDAL", "ruamel": "ruamel.yaml",
    "sentence_transformers": "sentence-transformers", "pytorch_lightning": "pytorch-lightning",
    "torch_geometric": "torch-geometric", "dm_control": "dm-control", "jose": "python-jose",
    "slugify": "python-slugify", "Xlib": "python-xlib", "telegram": "python-telegram-bot",
    "igraph": "igraph", "community": "python-louvain", "sklearn_crfsuite": "sklearn-crfsuite",
    "gflags": "python-gflags", "jsonpatch": "jsonpatch", "markdown": "Markdown", "jinja2": "Jinja2",
    "soundfile": "soundfile", "tensorflow_datasets": "tensorflow-datasets",
    "tensorflow_hub": "tensorflow-hub", "tf_keras": "tf-keras", "wx": "wxPython",
    "gi": "PyGObject", "cairo": "pycairo", "lxml": "lxml", "distutils": "setuptools",
    "paddle": "paddlepaddle", "Image": None,
    # not on a package index under a usable name, or needs a platform/CUDA-specific build
    "apex": None, "detectron2": None, "win32api": None, "win32con": None, "winreg": None,
    "_winapi": None, "msvcrt": None, "cupy": None, "tensorrt_llm": None,
}
# distribution (canonical) -> import names, for choosing extras before anything is installed
DIST_TO_IMPORTS_EXTRA: dict[str, tuple[str, ...]] = {
    "pytorch-lightning": ("pytorch_lightning", "lightning"), "tensorflow-cpu": ("tensorflow",),
    "tensorflow-gpu": ("tensorflow",), "opencv-python-headless": ("cv2",),
    "opencv-contrib-python": ("cv2",), "jax": ("jax",), "jaxlib": ("jaxlib", "jax"),
    "scikit-learn": ("sklearn",), "pillow-simd": ("PIL",), "protobuf": ("google",),
}

NETWORK_SIGNS = (
    "Failed to establish a new connection", "Temporary failure in name resolution",
    "Name or service not known", "Max retries exceeded", "ReadTimeoutError", "ConnectTimeoutError",
    "Connection refused", "Network is unreachable", "No route to host", "ConnectionResetError",
    "Could not fetch URL", "SSLError", "ProxyError", "Read timed out", "error sending request",
    "dns error", "operation timed out", "Failed to fetch", "Could not connect",
    "Connection reset by peer", "connect timeout",
)
