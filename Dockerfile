# attnd container image (multi-stage). The build stage installs packages with the same
# script as .ci/run; the runtime stage carries only the libraries, the Vulkan loader and
# Mesa's lavapipe. (The HTTP daemon and its deployment details arrive with `attnd serve`.)
FROM debian:12 AS build
WORKDIR /src
COPY deploy/install-deps.sh deploy/install-deps.sh
RUN ./deploy/install-deps.sh
COPY . .
RUN make -j"$(nproc)" build/release/attnd

FROM debian:12-slim AS runtime
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN /tmp/install-deps.sh runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
    && useradd --system --uid 10001 --home /nonexistent attnd
COPY --from=build /src/build/release/attnd /usr/local/bin/attnd
USER attnd
VOLUME ["/models"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/attnd"]
CMD ["--help"]
