# The kafkasim image: the broker, the kafkasim CLI and the chaos tools, in a virtual environment.
# BASE_IMAGE is any Debian-based image with Python >= 3.11 and its venv module: the public default, or the
# image scripts/build-images.sh makes from Debian's packages on a machine that cannot pull.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

# A venv, not the system interpreter: Debian's python3 refuses pip installs (PEP 668), the public image's
# lives in /usr/local; a venv behaves the same on both.
ENV VIRTUAL_ENV=/opt/kafkasim \
    PATH=/opt/kafkasim/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

# nftables and iproute2 (tc): 'kafkasim net ... --docker' runs them in a short-lived helper container on a
# broker's network namespace (--network container:<broker>, NET_ADMIN) when it cannot enter the namespace
# from the host (not root, or a remote engine). The broker itself never runs them.
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nftables iproute2 >/dev/null \
    && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin

# Dependencies first, in their own layer: editing kafkasim's code does not download them again. The
# analysis stack (Spark, pandas, notebooks: ~1 GB) runs on the host over collected traces, not in a broker.
ARG LEAVE_OUT="pyspark pandas pyarrow matplotlib nbformat nbclient ipykernel"
COPY pyproject.toml /src/pyproject.toml
COPY docker/requirements.py /src/requirements.py
RUN python3 -m venv /opt/kafkasim \
    && python3 /src/requirements.py /src/pyproject.toml ${LEAVE_OUT} > /src/requirements.txt \
    && pip install -q -r /src/requirements.txt "setuptools>=68" wheel

# Everything that does not depend on kafkasim's code before it, so a code change rebuilds one layer.
# Confluent's images keep the log here; a named volume on it keeps the log across restarts.
RUN mkdir -p /var/lib/kafka/data /etc/kafkasim
VOLUME /var/lib/kafka/data
WORKDIR /var/lib/kafka
EXPOSE 9092 9192 9404
HEALTHCHECK --interval=3s --timeout=15s --start-period=5s --retries=40 \
    CMD ["python", "-m", "cluster.docker_env", "--check"]
CMD ["python", "-m", "cluster.docker_env"]

# The build context is only the packages, README.md and pyproject.toml (.dockerignore).
COPY . /src
RUN pip install -q --no-deps --no-build-isolation /src && rm -rf /src && kafkasim --help >/dev/null
