"""relcp_mpi: MPI-parallel smooth rigid-body contact (ReLCP) with a certified event-driven sphere engine."""
import os
import subprocess
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py


class BuildPyWithAOT(build_py):
    """build_py, plus the ahead-of-time compiled kernels (relcp_mpi/geometry/aot_build.py) when numba (and a C
    compiler) can be used at build time.  Without them nothing is lost but speed: the installed package runs
    numba's JIT if numba is installed at run time, else the numpy kernels (the same bits).  Editable installs
    skip it (tools/setup.sh builds the module in the source tree)."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("RELCP_AOT_BUILD", "1") == "0":
            return
        out = os.path.join(self.build_lib, "relcp_mpi", "geometry")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(self.build_lib),
                                                            os.environ.get("PYTHONPATH", "")]))
        try:
            subprocess.run([sys.executable, "-m", "relcp_mpi.geometry.aot_build", "--out", out], env=env,
                           check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"[relcp_mpi] no ahead-of-time kernels ({exc}); numba JIT or numpy at run time", file=sys.stderr)


setup(
    name="relcp_mpi",
    version="0.1.0",
    description="MPI-parallel ReLCP simulation of smooth rigid bodies in nonsmooth contact",
    packages=find_packages(include=["relcp_mpi", "relcp_mpi.*"]),
    python_requires=">=3.9",
    install_requires=["numpy", "scipy", "pyyaml", "mpi4py", "petsc4py", "h5py"],
    extras_require={"test": ["pytest", "pytest-mpi", "hypothesis"]},
    entry_points={"console_scripts": ["relcp-mpi = relcp_mpi.cli:main"]},
    cmdclass={"build_py": BuildPyWithAOT},
)
