# mirror-sd web app on CPU (Hugging Face Spaces "docker" SDK or any container host).
# The same app and the same requirements.txt as a local run and a Gradio Space (docs/hosting.md);
# Python 3.11 as on the development machines (the Gradio Space's header asks for 3.12, which
# ZeroGPU needs). `spaces` is installed but inert here: no SPACES_ZERO_GPU in a container.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    MIRROR_SD_CACHE=/home/app/.cache/mirror-sd

# g++ builds the AVX2 kernels (mirror_sd/cpu/int8.py: int8, int4, fast layers); without it
# int8 uses fbgemm and int4 is refused with the reason
RUN apt-get update && apt-get install -y --no-install-recommends g++ && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 1000 app
WORKDIR /home/app/mirror-sd

COPY requirements.txt .
# Pass PyTorch's CPU wheel index as a build arg for a small image
# (docker build --build-arg PIP_EXTRA_INDEX_URL=<cpu wheel index> .); without it pip
# takes the default torch build, which is larger but works the same.
ARG PIP_EXTRA_INDEX_URL=""
RUN pip install -r requirements.txt

COPY --chown=app:app . .
USER app
# The default pair's int8 cache (straight from the GGUF files, no fp32 copy) and the AVX2
# kernels, compiled beside it, once at build time, so the first request only loads them
RUN python -m mirror_sd.models --prepare-default

EXPOSE 7860
CMD ["python", "app.py"]
