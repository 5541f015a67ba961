"""Command line of ``bertperf-check`` (work in progress)."""

import sys


def main(argv=None):
    print("bertperf-check: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
