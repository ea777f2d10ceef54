"""``python -m relcp_mpi`` entry point."""
import sys

from relcp_mpi.driver.signals import install_signal_handlers

install_signal_handlers()          # before anything else is imported (relcp_mpi.cli.main installs them again)

from relcp_mpi.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
