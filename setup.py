"""Builds the optional C hot loop; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and binrelay runs its
pure-Python loop (relay/hotloop.py), only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("binrelay._speedups", ["src/binrelay/_speedups.c"],
                  extra_compile_args=["-O3"], optional=True),
    ],
)
