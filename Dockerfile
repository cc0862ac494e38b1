# syntax=docker/dockerfile:1
# Multi-stage: dependencies are built in a throwaway stage; the runtime image runs as a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir uv
COPY requirements.lock pyproject.toml README.md ./
RUN uv venv /opt/venv && uv pip install --python /opt/venv/bin/python --no-cache -r requirements.lock
COPY app ./app
COPY alembic ./alembic
COPY alembic.ini ./
RUN uv pip install --python /opt/venv/bin/python --no-cache --no-deps .

FROM python:3.11-slim AS runtime
RUN useradd --create-home --uid 10001 threadkeeper
COPY --from=build /opt/venv /opt/venv
WORKDIR /srv
COPY --chown=threadkeeper:threadkeeper alembic ./alembic
COPY --chown=threadkeeper:threadkeeper alembic.ini ./
COPY --chown=threadkeeper:threadkeeper app ./app
RUN mkdir -p /srv/var/workdir && chown -R threadkeeper:threadkeeper /srv/var
USER threadkeeper
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    THREADKEEPER_HOST=0.0.0.0 \
    THREADKEEPER_WORKDIR_ROOT=/srv/var/workdir
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/ready').status==200 else 1)"
CMD ["python", "-m", "app", "serve"]
