"""Mirror-SD visualizer: `python app.py` (the Hugging Face Spaces entry point).

Importing this module builds the Gradio app without launching it and without loading any
model (models load on the first Run). Environment:
  GRADIO_SERVER_PORT (default 7860), GRADIO_SERVER_NAME (e.g. 0.0.0.0 in a container),
  MIRROR_SD_QUEUE_SIZE (default 16), MIRROR_SD_TINY=1 (tests: tiny random models).
"""
import logging

from ui.layout import build_demo, launch

demo = build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    launch(demo)
