# syntax=docker/dockerfile:1
#
# codellm container image: a static Go binary on a slim Debian with the interpreters blocks run under.
# Base images are named in full (podman and buildah refuse short names); where no registry is reachable,
# deploy/container/base.sh builds the base from debootstrap and the build arguments below point at it
# (docs/operator.md §4.2).
#
#   docker build -t codellm .            # or: podman build -t codellm .
#   docker run --rm -p 8080:8080 -e CODELLM_API_KEY=<secret> \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined --cgroupns=private \
#     <a delegated cgroup: docs/operator.md §4.2> codellm
#
# The native sandbox creates user, PID, mount and network namespaces, mounts a fresh /proc and tmpfs and
# pivot_roots inside them. Docker's default seccomp profile refuses unshare/clone with namespace flags to
# a process without CAP_SYS_ADMIN, its default AppArmor profile refuses mount, and its masked /proc paths
# make the kernel refuse the fresh /proc mount; hence the three --security-opt above (none of them adds a
# capability or makes the container privileged). Per-run cgroup limits need a cgroup subtree delegated to
# the container's user (uid 10001) and mounted over /sys/fs/cgroup: operator guide §4.2 gives the mounts.
# Without one, native mode refuses to run code (fail closed; /readyz is 503 naming cgroup); the explicit
# alternative is -e CODELLM_SANDBOX=besteffort, which logs every missing mechanism and leaves the
# container's own limits as the bound of all runs together. `docker run … codellm doctor` prints what
# the container provides.

ARG GO_IMAGE=docker.io/library/golang:1.26-trixie
ARG BASE_IMAGE=docker.io/library/debian:trixie-slim

FROM ${GO_IMAGE} AS build
# The golang image has these already; a debootstrap base gets the toolchain mounted at /usr/local/go.
ENV PATH=/usr/local/go/bin:$PATH GOPATH=/go GOFLAGS=-buildvcs=false
ARG GOPROXY=https://proxy.golang.org,direct
ENV GOPROXY=${GOPROXY}
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/codellm ./cmd/codellm

# The runtime image of the worker's docker supervisors (`codellm worker --runtime-supervisor docker`,
# bridge-protocol §11.4): `docker build --target container-runtime -t codellm-runtime .`. The worker runs
# it with --network none, every capability dropped, no-new-privileges and no published port, and reaches
# the runner on 127.0.0.1:2000 inside with `docker exec … curl` (hence curl here). codellm's sandbox mode
# inside is the operator's explicit choice (--container-sandbox native|besteffort). Without a registry,
# deploy/container/rootfs.sh assembles the same image from the host for `docker import`/`podman import`.
FROM ${BASE_IMAGE} AS container-runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 nodejs perl bash ripgrep ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 codellm \
 && useradd --system --uid 10001 --gid codellm --home-dir /var/lib/codellm --create-home --shell /usr/sbin/nologin codellm \
 && install -d -o codellm -g codellm -m 0700 /var/lib/codellm/work
COPY --from=build /out/codellm /usr/local/bin/codellm
USER 10001:10001
WORKDIR /var/lib/codellm
ENV CODELLM_LISTEN=127.0.0.1:2000 \
    CODELLM_WORK_DIR=/var/lib/codellm/work \
    CODELLM_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/codellm"]
CMD ["serve"]

# The default (last) target: codellm serve for clients outside the container.
FROM ${BASE_IMAGE} AS runtime
# Interpreters for code blocks (python3, node, perl, bash) and ripgrep for the workspace search tool.
# No curl, no shell tools beyond what bash and coreutils bring.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 nodejs perl bash ripgrep ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# LibreChat's Code Interpreter languages (docs/librechat.md): compilers and runtimes for ts c cpp java php rs go
# d f90 r, and matplotlib for plots. Build with --build-arg LIBRECHAT_LANGUAGES=0 for the small image; a
# toolchain that is missing is simply not listed in /api/v2/runtimes.
ARG LIBRECHAT_LANGUAGES=1
RUN if [ "$LIBRECHAT_LANGUAGES" = 1 ]; then apt-get update \
 && apt-get install -y --no-install-recommends gcc g++ libc6-dev gdc gfortran default-jdk-headless rustc golang-go \
      php-cli r-base-core node-typescript python3-matplotlib \
 && rm -rf /var/lib/apt/lists/*; fi
# A fixed non-root uid so Kubernetes runAsNonRoot can verify it and volumes can be chowned to it.
RUN groupadd --system --gid 10001 codellm \
 && useradd --system --uid 10001 --gid codellm --home-dir /var/lib/codellm --create-home --shell /usr/sbin/nologin codellm \
 && install -d -o codellm -g codellm -m 0700 /var/lib/codellm/work
COPY --from=build /out/codellm /usr/local/bin/codellm
USER 10001:10001
WORKDIR /var/lib/codellm
# A container is reached from outside its loopback, so listen on all interfaces; serve then refuses to
# start without CODELLM_API_KEY (or --client-ca, or an explicit --insecure-public).
ENV CODELLM_LISTEN=0.0.0.0:8080 \
    CODELLM_WORK_DIR=/var/lib/codellm/work \
    CODELLM_LOG_FORMAT=json
EXPOSE 8080
# /readyz is 200 only when the sandbox self-test and the interpreter checks pass. bash's /dev/tcp keeps
# the image free of an HTTP client.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080 && printf 'GET /readyz HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/codellm"]
CMD ["serve"]
