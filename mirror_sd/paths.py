"""Where the repository's shipped files live (one assets folder for everything the engine reads),
and the one lock that serialises work on a shared cache folder between processes."""
import contextlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS = REPO_ROOT / "assets"  # exit lenses, stream heads, draft vocabularies, questions, screenshot


@contextlib.contextmanager
def exclusive(lock_file: Path):
    """Hold an OS lock on `lock_file` (created if missing): one process at a time, and the lock
    goes with its holder if that process dies. Where there is no fcntl (Windows): no lock."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
