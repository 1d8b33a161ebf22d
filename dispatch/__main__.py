"""``python -m dispatch``: the command line (backends, explain, tune, cache, ab)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
