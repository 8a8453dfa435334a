"""The ``splatdrive`` console script: one subcommand per entry point.

splatdrive train ...      = python -m learner.train ...
splatdrive generate ...   = python -m scenarios.generate ...
splatdrive evaluate ...   = python -m evaluation ...
splatdrive study ...      = python -m learner.study ...  (seeds x stages on held-out clips)
splatdrive export ...     = python -m policy.export ...
splatdrive render ...     = python -m sim.render ...
splatdrive bench ...      = python -m sim.bench ...   (also env-bench, learner-bench)
"""

from __future__ import annotations

import runpy
import sys

COMMANDS = {
    "train": "learner.train",
    "generate": "scenarios.generate",
    "evaluate": "evaluation",
    "export": "policy.export",
    "render": "sim.render",
    "bench": "sim.bench",
    "env-bench": "envs.bench",
    "learner-bench": "learner.bench",
    "study": "learner.study",
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__.strip())
        print("\ncommands: " + ", ".join(COMMANDS))
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"splatdrive: unknown command {cmd!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    sys.argv = [f"splatdrive {cmd}", *rest]
    # run_module executes the entry as __main__ without importing it under its own name, so the
    # module named sim.render never shadows the sim.render function.
    try:
        runpy.run_module(COMMANDS[cmd], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        return int(e.code or 0) if not isinstance(e.code, str) else (print(e.code, file=sys.stderr) or 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
