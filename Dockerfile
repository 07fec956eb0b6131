# The service image: one image, one process type per pool (`ledger-deletion worker --pool <name>`), the
# watcher (`ledger-deletion watch`), setup and the reconcile job (its spark extra, with a Java runtime).
# The product only (pyproject.toml's packages): the dev stack and its commands are not installed here.
# Every package comes from requirements.lock at an exact version with its hash (scripts/lock writes it);
# tests/deploy/test_image.py checks this file against the lock and the package layout.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # Spark and Python write their caches under HOME: the pods mount a writable /tmp, nothing else.
    HOME=/tmp

# Spark runs on the JVM: Java 17, the oldest that Spark 4 supports. Debian's slim images lack the man
# directories the JRE's alternatives link into.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

# A user of its own, never root; the manifests run the pods as this uid.
RUN groupadd --system --gid 10001 ledger-deletion \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin ledger-deletion

WORKDIR /app
COPY requirements.lock ./
# The build backend first (some locked packages are source distributions), then everything else, each
# exactly as locked: no resolver, no dependency pip would pick on its own, no file with another hash.
RUN grep -A1 -E '^(setuptools|wheel)==' requirements.lock | grep -v '^--$' >build.lock \
    && pip install --no-cache-dir --require-hashes --no-deps -r build.lock \
    && pip install --no-cache-dir --require-hashes --no-deps --no-build-isolation -r requirements.lock \
    && rm build.lock

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

USER 10001:10001
ENTRYPOINT ["ledger-deletion"]
CMD ["worker", "--pool", "all"]
