"""setuptools entry: builds the native parts through cffi (see instrument/build_native.py).

The C sources and headers under instrument/ are also copied into the package as
``wcetfit/_instrument`` so that per-prototype thunks can be compiled at run time from an
installed wheel; an editable install finds them in the repository instead.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithInstrument(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        dest = os.path.join(self.build_lib, "wcetfit", "_instrument")
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(os.path.join(here, "instrument")):
            if name.endswith((".c", ".h")):
                shutil.copy2(os.path.join(here, "instrument", name), dest)


setup(
    cffi_modules=["instrument/build_native.py:ffibuilder"],
    cmdclass={"build_py": BuildPyWithInstrument},
)
