# mirror-sd web app on CPU (Hugging Face Spaces "docker" SDK or any container host).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    MIRROR_SD_CACHE=/home/app/.cache/mirror-sd

RUN useradd --create-home --uid 1000 app
WORKDIR /home/app/mirror-sd

COPY requirements.txt .
# torch's CPU wheel index: the default index would bring a multi-GB CUDA build
RUN pip install --extra-index-url https://download.pytorch.org/whl/cpu -r requirements.txt

COPY --chown=app:app . .
USER app
# Convert the bundled default pair once at build time, so the first request is fast
RUN python -m mirror_sd.loading --prepare-default

EXPOSE 7860
CMD ["python", "app.py"]
