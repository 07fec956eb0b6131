# The service image: one image, one process type per pool (`ledger-deletion worker --pool <name>`).
# The product only (pyproject.toml's packages): the dev stack and its commands are not installed here.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ledger_deletion ledger_deletion
COPY workflows workflows
COPY activities activities
COPY workers workers
COPY reconcile reconcile
RUN pip install --no-cache-dir .
USER nobody
ENTRYPOINT ["ledger-deletion"]
CMD ["worker", "--pool", "all"]
