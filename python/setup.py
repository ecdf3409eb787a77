# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
"""Builds tpu_user._tpu_user against libtpu_user.

The library is found, in this order: TPU_USER_LIB (a libtpu_user.a or a
directory holding one), this tree's ../lib/libtpu_user.a (run `make lib`
first), else pkg-config tpu_user (an installed library).  The static
archive is linked in, so the extension needs nothing at run time but
rdma-core.  The stable ABI of Python 3.11 (abi3) is used.
"""
import os
import shlex
import subprocess

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
SOURCES = ["module.c", "errors.c", "header.c", "tensor.c", "completion.c", "context.c",
           "rendezvous.c", "pipe.c", "world.c", "log.c", "agent.c",
           "agent_async.c"]


def library():
    lib = os.environ.get("TPU_USER_LIB") or os.path.join(TREE, "lib")
    if os.path.isdir(lib):
        lib = os.path.join(lib, "libtpu_user.a")
    if os.path.exists(lib):
        include = os.path.join(os.path.dirname(os.path.dirname(lib)), "include")
        # depends: a rebuilt archive or header relinks the extension.
        return dict(include_dirs=[include], extra_objects=[lib],
                    depends=[lib, os.path.join(include, "tpu_user.h")],
                    libraries=["rdmacm", "ibverbs", "pthread"])
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "tpu_user"], check=True,
                           capture_output=True, text=True).stdout
    args = shlex.split(flags)
    return dict(include_dirs=[a[2:] for a in args if a.startswith("-I")],
                library_dirs=[a[2:] for a in args if a.startswith("-L")],
                libraries=[a[2:] for a in args if a.startswith("-l")] + ["pthread"])


ext = Extension(
    "tpu_user._tpu_user",
    sources=[os.path.join("src", s) for s in SOURCES],
    define_macros=[("Py_LIMITED_API", "0x030B0000"), ("_GNU_SOURCE", None)],
    py_limited_api=True,
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type", "-fvisibility=hidden"],
    **library(),
)

setup(ext_modules=[ext], options={"bdist_wheel": {"py_limited_api": "cp311"}})
