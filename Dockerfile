# attnd container image, multi-stage (`make image` builds it with docker or, without a Docker
# engine, with buildah; `make image-test` runs it and checks it over HTTP).
#   build:   Debian 12 with only the compiler and the -dev packages (deploy/install-deps.sh build),
#            compiles build/release/attnd from a clean tree.
#   runtime: Debian 12 slim with what `ldd attnd` needs and the Vulkan loader (install-deps.sh
#            runtime); no compiler, no source, no HTTP client (the HEALTHCHECK is a bash script).
#            On a GPU host mount the vendor's Vulkan driver (ICD) in, or the CPU kernels are used.
#            --build-arg VULKAN_CPU=1 adds Mesa's drivers (lavapipe: a Vulkan device on the CPU,
#            pulls LLVM; `make image VULKAN_CPU=1` tags it attnd:VERSION-vulkan-cpu).
#   Runs as an unprivileged user (uid 10001).
#
#   docker build -t attnd .
#   docker run --rm -p 8080:8080 attnd                                 # the baked-in default model
#   docker run --rm -p 8080:8080 -v "$PWD/models:/models:ro" attnd     # your /models/model.gguf
# /models/model.gguf is models/kjv.gguf from the tree when the tree has it; a mount at /models
# replaces it. SIGTERM (docker stop) drains: requests in flight get --grace-ms (default 10 s) to
# finish; give `docker stop -t` / stop_grace_period / terminationGracePeriodSeconds a little more.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN ./deploy/install-deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
# .dockerignore sends only the sources; never reuse objects from a host build folder
RUN rm -rf build && make -j"$(nproc)" build/release/attnd && strip -o /attnd build/release/attnd \
    && mkdir -p /out/models \
    && if [ -f models/kjv.gguf ]; then cp models/kjv.gguf /out/models/model.gguf; fi

FROM debian:12-slim AS runtime
ARG VULKAN_CPU=0
ARG VERSION=dev
LABEL org.opencontainers.image.title="attnd" org.opencontainers.image.version="$VERSION"
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN if [ "$VULKAN_CPU" = 1 ]; then /tmp/install-deps.sh vulkan-cpu; else /tmp/install-deps.sh runtime; fi \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log /tmp/install-deps.sh \
    && groupadd --system --gid 10001 attnd \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin attnd
COPY --from=build /attnd /usr/local/bin/attnd
COPY deploy/healthcheck.sh /usr/local/bin/attnd-healthcheck
# No VOLUME for /models: with a baked-in model Docker would copy it into a new anonymous volume
# on every `docker run`; a mount at /models (or /models/model.gguf) replaces it without one.
COPY --from=build --chown=10001:10001 /out/models/ /models/
USER 10001:10001
EXPOSE 8080
STOPSIGNAL SIGTERM
# /health answers 503 while the model loads, hence the start period.
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD ["/usr/local/bin/attnd-healthcheck"]
ENTRYPOINT ["/usr/local/bin/attnd"]
CMD ["serve", "--model", "/models/model.gguf", "--host", "0.0.0.0", "--port", "8080"]
