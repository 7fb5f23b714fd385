#!/bin/bash
# build-image.sh [--vulkan-cpu] - builds the container image from ./Dockerfile and tags it
# attnd:VERSION and attnd:latest (VERSION from the file VERSION); --vulkan-cpu builds the variant with
# Mesa's lavapipe, tagged attnd:VERSION-vulkan-cpu and attnd:latest-vulkan-cpu.
#   With a Docker engine that answers (`docker info`): `docker build`.
#   Otherwise buildah (--isolation chroot: no daemon, no cgroups needed). The Dockerfile's bases
#   (debian:12, debian:12-slim) come from local storage, else from the registry, else they are made
#   here with mmdebstrap from Debian's archive: one minbase bookworm root file system (cached as
#   build/image/bookworm-minbase.tar) imported as debian:12, and the same with the documentation,
#   man pages and locales removed (as Debian's own -slim images do) as debian:12-slim.
# Prints the build time and the image size. Env: IMAGE (attnd), ATTND_IMAGE_ENGINE (docker|buildah),
# REFRESH_BASE=1 remakes the mmdebstrap bases.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-attnd}
VERSION=$(cat VERSION)
suffix="" vulkan_cpu=0
case "${1:-}" in
  --vulkan-cpu) suffix="-vulkan-cpu" vulkan_cpu=1 ;;
  "") ;;
  *) echo "usage: $0 [--vulkan-cpu]" >&2; exit 2 ;;
esac
tags=("$IMAGE:$VERSION$suffix" "$IMAGE:latest$suffix")
args=(--build-arg "VERSION=$VERSION" --build-arg "VULKAN_CPU=$vulkan_cpu" -f Dockerfile)

engine=${ATTND_IMAGE_ENGINE:-}
if [ -z "$engine" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker; else engine=buildah; fi
fi

# make_bases: debian:12 and debian:12-slim into buildah's local storage, from one mmdebstrap run
make_bases() {
  local tar=build/image/bookworm-minbase.tar c
  if [ ! -s "$tar" ] || [ "${REFRESH_BASE:-0}" = 1 ]; then
    echo "build-image: making the base images with mmdebstrap (bookworm, minbase) into $tar"
    mkdir -p build/image
    # merged /usr made by the hook (as debootstrap does), not by the usrmerge package, which pulls perl
    mmdebstrap --variant=minbase --quiet --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr bookworm "${tar%.tar}.part.tar" \
      "deb http://deb.debian.org/debian bookworm main" \
      "deb http://deb.debian.org/debian bookworm-updates main" \
      "deb http://deb.debian.org/debian-security bookworm-security main"
    mv "${tar%.tar}.part.tar" "$tar"
  else
    echo "build-image: making the base images from the cached $tar (REFRESH_BASE=1 remakes it)"
  fi
  echo "build-image: bookworm-minbase.tar ready after $((SECONDS - t0)) s"
  for base in debian:12 debian:12-slim; do
    c=$(buildah from --quiet scratch)
    buildah add --quiet "$c" "$tar" / >/dev/null
    if [ "$base" = debian:12-slim ]; then
      buildah run --isolation chroot "$c" -- /bin/sh -c '
        printf "%s\n" "path-exclude /usr/share/doc/*" "path-include /usr/share/doc/*/copyright" \
          "path-exclude /usr/share/man/*" "path-exclude /usr/share/groff/*" "path-exclude /usr/share/info/*" \
          "path-exclude /usr/share/lintian/*" "path-exclude /usr/share/locale/*" >/etc/dpkg/dpkg.cfg.d/slim
        find /usr/share/doc -mindepth 1 ! -name copyright ! -type d -delete
        find /usr/share/doc -mindepth 1 -type d -empty -delete
        rm -rf /usr/share/man/* /usr/share/groff/* /usr/share/info/* /usr/share/lintian/* /usr/share/locale/*'
    fi
    buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
    buildah commit --quiet --rm "$c" "docker.io/library/$base" >/dev/null
    echo "build-image: made $base ($((SECONDS - t0)) s)"
  done
}

t0=$SECONDS
if [ "$engine" = docker ]; then
  docker build "${args[@]}" -t "${tags[0]}" -t "${tags[1]}" .
  size="$(( $(docker image inspect -f '{{.Size}}' "${tags[0]}") / 1000000 )) MB"
else
  command -v buildah >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 || ./deploy/install-deps.sh image
  for base in debian:12 debian:12-slim; do
    buildah inspect --type image "docker.io/library/$base" >/dev/null 2>&1 && continue
    if timeout 60 buildah pull --quiet "docker.io/library/$base" >/dev/null 2>&1; then
      echo "build-image: pulled $base"
    else
      echo "build-image: $base is not in local storage and cannot be pulled"
      make_bases
      break
    fi
  done
  # docker format: OCI images have no HEALTHCHECK; --layers keeps the build stage's package layer
  buildah bud --isolation chroot --pull=never --layers --format docker "${args[@]}" \
    -t "${tags[0]}" -t "${tags[1]}" .
  size=$(buildah images --format '{{.Size}}' "${tags[0]}")
  size=${size%%$'\n'*}  # one line per tag; not `| head`: with pipefail its SIGPIPE fails the build
fi
echo "build-image: ${tags[*]} built with $engine in $((SECONDS - t0)) s, $size"
