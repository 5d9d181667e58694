"""Fast kernels; the work is done by the compiled `kernels._ckern` extension."""

from kernels._ckern import adler32, dot

__all__ = ["adler32", "dot"]
