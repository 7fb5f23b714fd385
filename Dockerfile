# attnd container image, multi-stage.
#   build:   Debian 12 with the build packages (installed by deploy/install-deps.sh, the same
#            script .ci/run and `make deps` use), compiles build/release/attnd from a clean tree.
#   runtime: Debian 12 slim with only the run-time libraries (install-deps.sh runtime): libmicrohttpd,
#            cJSON, liburing, PCRE2, the Vulkan loader (libvulkan1) and Mesa's drivers
#            (mesa-vulkan-drivers: lavapipe, so there is always a Vulkan device), plus curl for
#            the HEALTHCHECK. Runs as an unprivileged user (uid 10001).
#
#   docker build -t attnd .
#   docker run --rm -p 8080:8080 -v "$PWD/models:/models:ro" attnd \
#       serve --model /models/model.gguf --host 0.0.0.0 --port 8080
# The model comes from the volume mounted at /models (nothing is baked into the image).
# SIGTERM (docker stop) drains: requests in flight get --grace-ms (default 10 s) to finish;
# give `docker stop -t` / stop_grace_period / terminationGracePeriodSeconds a little more.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN ./deploy/install-deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
# never reuse objects from the host's build folder
RUN rm -rf build && make -j"$(nproc)" build/release/attnd && strip -o /attnd build/release/attnd

FROM debian:12-slim AS runtime
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
    && groupadd --system --gid 10001 attnd \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin attnd \
    && mkdir -p /models && chown attnd:attnd /models
COPY --from=build /attnd /usr/local/bin/attnd
USER 10001:10001
VOLUME ["/models"]
EXPOSE 8080
STOPSIGNAL SIGTERM
# /health answers 503 while the model loads, hence the start period.
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD curl -fsS --max-time 2 http://127.0.0.1:8080/health || exit 1
ENTRYPOINT ["/usr/local/bin/attnd"]
CMD ["serve", "--model", "/models/model.gguf", "--host", "0.0.0.0", "--port", "8080"]
