"""python -m matrix [list | venv NAME...]: the combinations MATRIX selects with their interpreters, or make (or
reuse) combinations' virtual environments and print their paths."""

import argparse
import sys

from . import COMBINATIONS, MatrixError, ensure_venv, find_interpreter, installed, selected


def main(argv=None):
    parser = argparse.ArgumentParser(prog="matrix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="every combination, whether MATRIX selects it, its interpreter or why it has none")
    venv = sub.add_parser("venv", help="make or reuse the virtual environments of the named combinations")
    venv.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    try:
        chosen = {c.name for c in selected()}
        if args.command == "list":
            for combination in COMBINATIONS:
                python, version = find_interpreter(combination.python)
                print("%-18s %-8s %-48s %s" % (combination.name, "selected" if combination.name in chosen else "",
                                               combination.description,
                                               "%s (%s)" % (python, version) if python else "skipped: " + version))
        else:
            by_name = {c.name: c for c in COMBINATIONS}
            for name in args.names:
                if name not in by_name:
                    raise MatrixError("no combination %s" % name)
                path = ensure_venv(by_name[name])
                print(path, installed(path))
    except MatrixError as error:
        print("matrix: %s" % error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
