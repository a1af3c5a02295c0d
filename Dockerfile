# One image for every service; compose picks the verb. Build: docker build -t pi-dispatch .
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The worker fetches each forge job's tip commit and reads local folders with git.
RUN apt-get update && apt-get install -y --no-install-recommends git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY libs ./libs
COPY services ./services
RUN pip install . && rm -rf /src

# The receiver and router need no privileges; the worker runs as root only to reach the Docker socket and
# hand the job user its workspace. Job containers never run as root (PI_JOB_USER refuses uid 0).
RUN useradd --system --uid 10001 --home-dir /nonexistent pidispatch \
    && install -d -o 10001 -m 0700 /var/spool/pi-dispatch
WORKDIR /
ENTRYPOINT ["pi-dispatch"]
CMD ["--help"]
