"""One exception type for every problem a user can fix: the CLI prints its message and
exits non-zero, the engine turns it into an Error event, the UI shows it."""


class MirrorSDError(Exception):
    pass


def run_cli(command, *args) -> int:
    """Run a command-line entry point: a MirrorSDError is one `error:` line and exit status 2,
    Ctrl-C is status 130; anything else is a bug and keeps its traceback."""
    import sys
    try:
        return command(*args)
    except MirrorSDError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
