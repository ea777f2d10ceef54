"""``python -m relcp_mpi`` entry point."""
import sys

from relcp_mpi.cli import main

if __name__ == "__main__":
    sys.exit(main())
