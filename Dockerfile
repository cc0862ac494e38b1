# syntax=docker/dockerfile:1
# Production image: dependencies from requirements.runtime.lock only (no test or dev tools), built
# in a throwaway stage; the runtime stage runs as a non-root user. The same image serves the API
# (`python -m app serve`), the worker (`python -m app worker`) and migrations (`python -m app migrate`).
FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir uv
COPY requirements.runtime.lock pyproject.toml README.md ./
RUN uv venv /opt/venv && uv pip install --python /opt/venv/bin/python --no-cache -r requirements.runtime.lock
COPY app ./app
# The public import a user's own graph opts in to compression with (docs/own-graph.md).
COPY threadkeeper ./threadkeeper
RUN uv pip install --python /opt/venv/bin/python --no-cache --no-deps .

FROM python:3.11-slim AS runtime
RUN useradd --create-home --uid 10001 threadkeeper
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv
COPY alembic ./alembic
COPY alembic.ini ./
COPY app ./app
COPY threadkeeper ./threadkeeper
RUN mkdir -p /srv/var/workdir && chown -R threadkeeper:threadkeeper /srv/var
USER 10001:10001
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    THREADKEEPER_HOST=0.0.0.0 \
    THREADKEEPER_WORKDIR_ROOT=/srv/var/workdir \
    THREADKEEPER_WORKER_HEARTBEAT_FILE=/srv/var/worker.heartbeat
EXPOSE 8000
# The API's check; the worker service overrides it with `python -m app worker --check`.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/ready', timeout=2).status == 200 else 1)"]
STOPSIGNAL SIGTERM
CMD ["python", "-m", "app", "serve"]
