# The service's images, two targets of one build:
#   service    (the default, the last stage) the pools (`ledger-deletion worker --pool <name>`), the watcher
#              (`ledger-deletion watch`) and setup: no Java runtime, no pyspark.
#   reconcile  the reconcile job (`ledger-deletion reconcile`): the service with its spark extra and Java 17,
#              and a passwd entry for Spark's uid 185, the user apache/spark's executor images run as.
#   docker build -t ledger-deletion:0.1.0 .
#   docker build --target reconcile -t ledger-deletion-reconcile:0.1.0 .
# The product only (pyproject.toml's packages): the dev stack and its commands are not installed here.
# Every package comes from requirements.lock at an exact version with its hash, for x86-64 and aarch64
# (scripts/lock writes it); tests/deploy/test_image.py checks this file against the lock and the package layout.
FROM python:3.11.14-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # Spark and Python write their caches under HOME: the pods mount a writable /tmp, nothing else.
    HOME=/tmp

# A user of its own, never root; the manifests run the pods as this uid.
RUN groupadd --system --gid 10001 ledger-deletion \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin ledger-deletion

WORKDIR /app
COPY requirements.lock ./
# The build backend first (some locked packages are source distributions), then the lock down to its
# reconcile-only part, each exactly as locked: no resolver, no dependency pip would pick on its own, no file
# with another hash. An entry is its pin line and the hash lines that continue it.
RUN awk '/^(setuptools|wheel)==/ {keep = 1} keep {print} keep && !/\\$/ {keep = 0}' requirements.lock >build.lock \
    && pip install --no-cache-dir --require-hashes --no-deps -r build.lock \
    && sed '/^# --- the reconcile image only/,$d' requirements.lock >service.lock \
    && pip install --no-cache-dir --require-hashes --no-deps --no-build-isolation -r service.lock \
    && rm build.lock service.lock

COPY pyproject.toml README.md ./
COPY ledger_deletion ledger_deletion
COPY workflows workflows
COPY activities activities
COPY workers workers
COPY reconcile reconcile
# The product alone (--no-deps: its dependencies are the lock's), then pip's check that the lock holds
# every dependency of every installed package.
RUN pip install --no-cache-dir --no-deps --no-build-isolation . \
    && pip check \
    && rm -rf build ./*.egg-info


FROM base AS reconcile

# Spark runs on the JVM: Java 17, the oldest that Spark 4 supports. Debian's slim images lack the man
# directories the JRE's alternatives link into.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

# The Spark-on-Kubernetes driver runs as uid 185, as apache/spark's images do (their Dockerfile's spark_uid),
# so the executors can write what the driver creates; Hadoop's UserGroupInformation, which Spark calls at
# start, fails on a uid without a name.
RUN groupadd --system --gid 185 spark \
    && useradd --system --uid 185 --gid 185 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin spark

# The rest of the lock: the spark extra's packages (what the base stage installed is skipped as satisfied).
RUN pip install --no-cache-dir --require-hashes --no-deps --no-build-isolation -r requirements.lock \
    && pip check

USER 10001:10001
ENTRYPOINT ["ledger-deletion"]
CMD ["reconcile", "--help"]


FROM base AS service

USER 10001:10001
ENTRYPOINT ["ledger-deletion"]
CMD ["worker", "--pool", "all"]
