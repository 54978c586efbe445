# The trm-kaggle image: the package on PyTorch's official CUDA runtime image, for GPU nodes
# (Kubernetes pods, SLURM with a container runtime, a rented GPU box). Build and run:
#
#   docker build --build-arg TORCH_VERSION=2.8.0 --build-arg CUDA_VERSION=12.8 -t trm-kaggle .
#   docker run --gpus all --shm-size 16g -v "$PWD/workspace:/workspace" trm-kaggle train --preset arc2 ...
#
# Shared memory: Docker gives a container 64 MB of /dev/shm, too little for DataLoader workers and
# for NCCL between the GPUs of a node: pass --shm-size (or --ipc=host); the Kubernetes manifests of
# `trm-kaggle launch k8s` mount a memory-backed /dev/shm instead. The tag pytorch/pytorch:
# <TORCH_VERSION>-cuda<CUDA_VERSION>-cudnn<CUDNN_VERSION>-runtime must exist on Docker Hub.
ARG TORCH_VERSION=2.8.0
ARG CUDA_VERSION=12.8
ARG CUDNN_VERSION=9
FROM pytorch/pytorch:${TORCH_VERSION}-cuda${CUDA_VERSION}-cudnn${CUDNN_VERSION}-runtime

ARG TORCH_VERSION
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/trm_kaggle
COPY pyproject.toml README.md ./
COPY trm_kaggle ./trm_kaggle
# The README's install line, with the base image's torch pinned so pip keeps it (a test checks they match).
RUN python -m pip install "torch==${TORCH_VERSION}" -e ".[arc]"

# A non-root user; /workspace is the working directory (mount the data and the runs there).
RUN useradd --create-home --uid 1000 --user-group trm \
    && mkdir -p /workspace \
    && chown trm:trm /workspace
USER 1000:1000
WORKDIR /workspace

ENTRYPOINT ["trm-kaggle"]
CMD ["--help"]
