"""Mirror-SD visualizer: `python app.py` (the Hugging Face Spaces entry point).

Importing this module builds the Gradio app without launching it and without loading any
model; launching it starts preparing the default pair in the background. Environment:
  GRADIO_SERVER_PORT (default 7860), GRADIO_SERVER_NAME (e.g. 0.0.0.0 in a container),
  MIRROR_SD_QUEUE_SIZE (default 16), MIRROR_SD_TINY=1 (test mode: tiny random models).
"""
import logging
import os

from ui.layout import build_demo, launch

demo = build_demo(tiny=os.environ.get("MIRROR_SD_TINY", "") not in ("", "0"))

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    launch(demo)
