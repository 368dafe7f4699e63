"""``python -m swm``: the same command line as ``swm`` (for environments without the console script)."""

from swm.cli import main

if __name__ == "__main__":
    main()
