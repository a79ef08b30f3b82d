#!/usr/bin/env bash
# pincer's developer entry point on a Debian/Ubuntu machine.
#   ./run.sh demo    install what is missing, build, run the main job on local desktops:
#                    a live look at a desktop with the bench table, then the bundled `demo`
#                    benchmark with the oracle agent (expect SR 100%) and the random agent
#                    (expect ~0%), with their HTML reports
#   ./run.sh test    install what is missing, build, run every test
#   ./run.sh deps    only install the Debian packages
#   ./run.sh bench   build release binaries and run `pincer bench` on a fresh local desktop
set -euo pipefail
cd "$(dirname "$0")"

# Build: C toolchain and the -dev packages of the X11/xcap crates.
BUILD_PKGS="build-essential pkg-config libclang-dev libxcb1-dev libxcb-shm0-dev libxcb-randr0-dev
  libxkbcommon-dev libwayland-dev libpipewire-0.3-dev libegl-dev libgbm-dev"
# Run: the local desktop (Xvfb, D-Bus, AT-SPI, a window manager) and the apps tests drive.
RUN_PKGS="xvfb xauth dbus dbus-x11 at-spi2-core libatk-adaptor libgail-common openbox
  x11-xserver-utils x11-utils libglib2.0-bin gsettings-desktop-schemas dconf-service
  dconf-gsettings-backend fonts-dejavu-core gtk-3-examples zenity mousepad xfce4-terminal
  galculator thunar libreoffice-calc libreoffice-writer libreoffice-gtk3 chromium
  xdotool imagemagick x11vnc"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to install packages: run as root or install sudo" >&2; exit 1; fi
}

deps() {
  local missing=()
  for p in $BUILD_PKGS $RUN_PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${#missing[@]} Debian packages: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust 1.90 or newer (https://rustup.rs), then run this again" >&2
    exit 1
  fi
}

case "${1:-}" in
  deps) deps ;;
  demo)
    deps
    log "building release binaries (first build takes a few minutes)"
    cargo build --release --workspace --bins
    log "a local desktop, a real app, what pincer sees, and the bench table"
    ./target/release/pincer demo "${@:2}"
    stamp=$(date +%Y%m%d-%H%M%S)
    log "the bundled benchmark 'demo' with the oracle agent (two local desktops)"
    ./target/release/pincer run --tasks demo --agent oracle --out "runs/demo-oracle-$stamp"
    log "the same benchmark with the random agent (a baseline that should score about 0)"
    ./target/release/pincer run --tasks demo --agent random --out "runs/demo-random-$stamp"
    log "reports: runs/demo-oracle-$stamp/report.html and runs/demo-random-$stamp/report.html"
    ;;
  bench)
    deps
    cargo build --release --workspace --bins
    ./target/release/pincer demo --bench-only "${@:2}"
    ;;
  test)
    deps
    log "building"
    cargo build --workspace --bins --tests
    log "running tests"
    cargo test --workspace "${@:2}"
    ;;
  *)
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
