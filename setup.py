"""Build the one compiled extension, fastbench._core.engine (Cython + plain C in csrc/)."""
import os

import setuptools.command.build_ext
from setuptools import Extension, setup

CFLAGS = ["-O2", "-Wall", "-Wsign-compare", "-Wno-unused-function"]
LDFLAGS: list = []
DEFINES: list = []
DIRECTIVES = {"language_level": "3", "embedsignature": True}
FLAVOUR = "release"

if os.environ.get("FASTBENCH_DEBUG"):
    CFLAGS = ["-O0", "-g3", "-Wall"]
    DEFINES += [("FB_DEBUG", "1")]
    FLAVOUR = "debug"
if os.environ.get("FASTBENCH_ASAN"):
    CFLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
    LDFLAGS = ["-fsanitize=address,undefined"]
    DEFINES += [("FB_DEBUG", "1")]
    FLAVOUR = "asan"
DEFINES += [("FB_BUILD_FLAVOUR", '"%s"' % FLAVOUR)]


class build_ext(setuptools.command.build_ext.build_ext):
    # setuptools' build_ext, not Cython.Distutils (cython#5559): cythonize here so that
    # Cython is needed only at build time and editable installs land the .so in place.
    def finalize_options(self) -> None:
        from Cython.Build import cythonize

        self.distribution.ext_modules[:] = cythonize(
            self.distribution.ext_modules,
            compiler_directives=DIRECTIVES,
            annotate=bool(os.environ.get("FASTBENCH_ANNOTATE")),
            force=FLAVOUR != "release",
        )
        super().finalize_options()


setup(
    ext_modules=[
        Extension(
            "fastbench._core.engine",
            [
                "src/fastbench/_core/engine.pyx",
                "csrc/fb_http.c",
                "csrc/fb_sse.c",
                "csrc/fb_json.c",
                "csrc/fb_trace.c",
            ],
            include_dirs=["csrc"],
            define_macros=DEFINES,
            extra_compile_args=CFLAGS,
            extra_link_args=LDFLAGS,
        )
    ],
    cmdclass={"build_ext": build_ext},
)
