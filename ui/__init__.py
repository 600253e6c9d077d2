"""The web app: a live, side-by-side Mirror-SD visualizer (Gradio). It consumes the engine's
typed events only; models load and decode through mirror_sd."""
