"""One exception type for every problem a user can fix: the CLI prints its message and
exits non-zero, the engine turns it into an Error event, the UI shows it."""


class MirrorSDError(Exception):
    pass
