"""relcp_mpi: MPI-parallel smooth rigid-body contact (ReLCP) with a certified event-driven sphere engine."""
from setuptools import find_packages, setup

setup(
    name="relcp_mpi",
    version="0.1.0",
    description="MPI-parallel ReLCP simulation of smooth rigid bodies in nonsmooth contact",
    packages=find_packages(include=["relcp_mpi", "relcp_mpi.*"]),
    python_requires=">=3.9",
    install_requires=["numpy", "scipy", "pyyaml", "mpi4py", "petsc4py", "h5py"],
    extras_require={"test": ["pytest", "pytest-mpi", "hypothesis"]},
    entry_points={"console_scripts": ["relcp-mpi = relcp_mpi.cli:main"]},
)
