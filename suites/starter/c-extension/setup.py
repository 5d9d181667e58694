from setuptools import Extension, setup

setup(
    name="kernels",
    version="0.1.0",
    packages=["kernels"],
    ext_modules=[Extension("kernels._ckern", ["kernels/_ckern.c"], extra_compile_args=["-O2"])],
    python_requires=">=3.8",
)
