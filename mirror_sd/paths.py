"""Where the repository's shipped files live: one assets folder for everything the engine reads."""
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
ASSETS = REPO_ROOT / "assets"  # exit lenses, stream heads, draft vocabularies, questions, screenshot
