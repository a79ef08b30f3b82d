#!/usr/bin/env bash
# pincer's developer entry point on a Debian/Ubuntu machine.
#   ./run.sh demo    install what is missing, build, run the main job on local desktops:
#                    a live look at a desktop with the bench table, then the bundled `demo`
#                    benchmark with the oracle agent (expect SR 100%) and the random agent
#                    (expect ~0%), with their HTML reports
#   ./run.sh test    install what is missing, check formatting, build, lint (clippy), run
#                    every test
#   ./run.sh deps    only install the Debian packages
#   ./run.sh shim    build the Android shim for phones and emulators (static aarch64 and
#                    x86_64 musl binaries, linked with zig), for `pincer android connect`
#   ./run.sh wheel   build the Python package pincer-bench (an abi3 wheel with the pincer
#                    binaries, into target/wheels/release) for `pip install`
#   ./run.sh bench   build release binaries and measure what the README's Speed section
#                    shows: `pincer bench` on a fresh 1920x1080 desktop with
#                    gtk3-widget-factory open, the UI trees of zenity and LibreOffice
#                    Calc, the 10,000-screenshot soak, video streams' guest CPU and
#                    bytes a second, the evaluator, a VM, the
#                    Android shim on a stand-in phone, the bundled suite sharded over a
#                    local three-node Slurm cluster against one machine, what the
#                    Python interface and the MCP server add per step, OSWorld's import,
#                    fetch and scoring, and OSWorld's offline tasks on the osworld image
#                    with the oracle and the random agent
set -euo pipefail
cd "$(dirname "$0")"

# Build: C toolchain and the -dev packages of the X11 crates; libpipewire and libclang
# (bindgen) for pincer-screencast, which reads GNOME's screen cast.
BUILD_PKGS="build-essential pkg-config libzstd-dev libxcb1-dev libxcb-shm0-dev libxcb-randr0-dev libxkbcommon-dev
  libpipewire-0.3-dev libclang-dev"
# Wayland (tests): a headless mutter with Xwayland, PipeWire and WirePlumber for its screen
# cast, and GTK 3 and 4 apps native on Wayland (PyGObject).
WAYLAND_PKGS="mutter gnome-shell xwayland pipewire wireplumber sway python3-gi gir1.2-gtk-3.0 gir1.2-gtk-4.0"
# Run: the local desktop (Xvfb, D-Bus, AT-SPI, a window manager) and the apps tests drive;
# bubblewrap sandboxes API tools, Radicale and dovecot are their offline services in tests;
# gnome-terminal and python3-xlib are what OSWorld's live getters read in tests.
RUN_PKGS="xvfb xauth dbus dbus-x11 at-spi2-core libatk-adaptor libgail-common openbox
  x11-xserver-utils x11-utils libglib2.0-bin gsettings-desktop-schemas dconf-service
  dconf-gsettings-backend fonts-dejavu-core gtk-3-examples zenity mousepad xfce4-terminal
  gtk-4-examples nautilus galculator thunar libreoffice-calc libreoffice-writer libreoffice-gtk3 chromium
  gnome-terminal python3-xlib
  xdotool xclip dconf-cli imagemagick x11vnc procps ffmpeg bubblewrap radicale dovecot-imapd curl"

# VMs and images: mmdebstrap builds, QEMU runs (qemu-system-x86 and qemu-utils must come
# from one suite: see vm_deps), mkfs.ext4 makes file systems, podman imports container images;
# gpg and dpkg-dev make the signed apt repository a test recipe adds.
VM_PKGS="mmdebstrap e2fsprogs podman runc gpg gpg-agent dpkg-dev"

# Android: adb (its server, for `pincer android`), qemu-user-static (tests run the aarch64
# shim under it), python3-venv (zig and cargo-zigbuild come from PyPI into a venv); for the
# shim's clipboard helper (a dex written in smali): libsmali-java assembles it (tests check
# the committed dex is its source assembled), dexdump checks it, enjarify turns it into JVM
# classes that the JDK (javac, java) runs over stand-in Android framework classes.
ANDROID_PKGS="adb qemu-user-static python3-venv libsmali-java dexdump enjarify default-jdk-headless"

# Many machines: a real Slurm cluster (controller, three nodes, munge) that the tests start
# on this machine in a temporary directory.
SLURM_PKGS="slurm-wlm slurm-client munge bc"
SHIM_TARGETS="aarch64-unknown-linux-musl x86_64-unknown-linux-musl"

# Python: maturin builds the pincer-bench wheel; pytest, the official MCP SDK and Gymnasium
# test it. All from PyPI into a venv under target/.
PY_VENV=target/pyvenv
PY_PKGS="maturin>=1.9,<2 pytest>=8 mcp>=1.20 gymnasium>=0.29"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to install packages: run as root or install sudo" >&2; exit 1; fi
}

deps() {
  local missing=()
  for p in $BUILD_PKGS $RUN_PKGS "$@"; do
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

# A normal user for the tests that run a desktop session as one (sway refuses root, and the
# session's D-Bus and AT-SPI need a passwd entry), added once when the tests run as root.
test_user() {
  if [ "$(id -u)" = 0 ] && ! id -u pincer-tester >/dev/null 2>&1; then
    log "adding the user pincer-tester for the tests that run a desktop session as a normal user"
    useradd --create-home --shell /bin/bash pincer-tester
  fi
}

# `pincer bench` ARGS on a headless sway at 1920x1080 with gtk3-widget-factory, run as the
# user running this (as pincer-tester when that is root: sway refuses root), with a
# release pincer-agent inside; $1 is the pincer CLI.
sway_bench() {
  local p=$1 dir as=() agent
  shift
  dir=$(mktemp -d)
  agent="$(cd "$(dirname "$p")" && pwd)/pincer-agent"
  mkdir -p "$dir/rt" "$dir/home/agent"
  printf 'output HEADLESS-1 resolution 1920x1080\nxwayland disable\ndefault_border none\n' \
    > "$dir/home/sway.conf"
  if [ "$(id -u)" = 0 ]; then
    chown -R pincer-tester: "$dir"
    as=(setpriv --reuid pincer-tester --regid pincer-tester --clear-groups)
  fi
  chmod 700 "$dir/rt"
  local run=("${as[@]}" env -u DISPLAY -u WAYLAND_DISPLAY XDG_RUNTIME_DIR="$dir/rt" HOME="$dir/home"
    DBUS_SESSION_BUS_ADDRESS="unix:path=$dir/rt/bus" XDG_SESSION_TYPE=wayland XDG_CURRENT_DESKTOP=sway)
  setsid "${run[@]}" dbus-daemon --session --nofork --nopidfile --address="unix:path=$dir/rt/bus" &
  local group=$!
  sleep 0.5
  "${run[@]}" WLR_BACKENDS=headless WLR_LIBINPUT_NO_DEVICES=1 WLR_RENDERER=pixman \
    sway -c "$dir/home/sway.conf" >"$dir/sway.log" 2>&1 &
  for _ in $(seq 100); do [ -S "$dir/rt/wayland-1" ] && break; sleep 0.1; done
  "${run[@]}" WAYLAND_DISPLAY=wayland-1 GDK_BACKEND=wayland gtk3-widget-factory >/dev/null 2>&1 &
  "${run[@]}" WAYLAND_DISPLAY=wayland-1 "$agent" --listen 127.0.0.1:0 --name bench-sway \
    --state-dir "$dir/home/agent" --ready-file "$dir/home/agent/ready.json" >"$dir/agent.log" 2>&1 &
  for _ in $(seq 100); do [ -s "$dir/home/agent/ready.json" ] && break; sleep 0.1; done
  sleep 5   # the app up, registered with AT-SPI
  local envs="$dir/envs.toml" addr fp
  addr=$(sed -n 's/.*"addr":"\([^"]*\)".*/\1/p' "$dir/home/agent/ready.json")
  fp=$(sed -n 's/.*"fingerprint":"\([^"]*\)".*/\1/p' "$dir/home/agent/ready.json")
  "$p" --envs "$envs" env add bench-sway "$addr" --token-file "$dir/home/agent/token" --fingerprint "$fp"
  "$p" --envs "$envs" bench --env bench-sway "$@" || true
  kill -- -"$group" 2>/dev/null || true
  pkill -f "$dir" 2>/dev/null || true   # sway, the agent; the app ends with sway
  rm -rf "$dir"
}

# qemu-system-x86 and qemu-utils from the same suite. Some machines carry a newer qemu-utils
# (a backport) than their suite's qemu-system-x86; installing the latter next to it removes
# qemu-img, so both are pinned to the version the suite has for qemu-system-x86.
vm_deps() {
  local want have_sys have_img
  want=$(apt-cache policy qemu-system-x86 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [ -z "$want" ] || [ "$want" = "(none)" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    want=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')
  fi
  have_sys=$(dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null || true)
  have_img=$(dpkg-query -W -f='${Version}' qemu-utils 2>/dev/null || true)
  if [ "$have_sys" != "$want" ] || [ "$have_img" != "$want" ] || ! command -v qemu-img >/dev/null; then
    log "installing qemu-system-x86 and qemu-utils $want"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      --allow-downgrades "qemu-system-x86=$want" "qemu-utils=$want"
  fi
  # `pincer image import` edits users' disks with libguestfs (after QEMU, which it needs),
  # whose small appliance VM boots the host's own kernel: containers and minimal machines
  # have none in /boot. OVMF boots imported UEFI disks.
  deps libguestfs-tools ovmf
  if ! ls /boot/vmlinuz-* >/dev/null 2>&1; then
    local k=linux-image-amd64
    apt-cache show "$k" >/dev/null 2>&1 || k=linux-image-generic
    log "installing $k: libguestfs boots the host's kernel and this machine has none in /boot"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$k"
  fi
}

# The shim as phones run it: static musl binaries, linked by zig (no Android NDK needed).
# $1: "" for a debug build (tests), --release for phones.
shims() {
  if ! command -v rustup >/dev/null; then
    echo "rustup not found: the shim's musl targets come from rustup (https://rustup.rs)" >&2
    exit 1
  fi
  local installed t venv=target/tools/zig
  installed=$(rustup target list --installed)
  for t in $SHIM_TARGETS; do
    grep -qx "$t" <<<"$installed" || rustup target add "$t"
  done
  if [ ! -x "$venv/bin/cargo-zigbuild" ]; then
    log "installing zig and cargo-zigbuild from PyPI into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q ziglang cargo-zigbuild
  fi
  for t in $SHIM_TARGETS; do
    log "building pincer-shim for $t"
    PATH="$PWD/$venv/bin:$PATH" cargo zigbuild -p pincer-shim --target "$t" ${1:+"$1"}
  done
}

# rustfmt and clippy, which `test` holds the code to, from rustup when they are missing.
lint_tools() {
  local c
  for c in rustfmt clippy; do
    if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
      command -v rustup >/dev/null || { echo "cargo $c is missing: install it (rustup component add $c)" >&2; exit 1; }
      rustup component add "$c"
    fi
  done
}

py_venv() {
  if ! "$PY_VENV/bin/python" -c 'import maturin, mcp, gymnasium, pytest' 2>/dev/null; then
    log "installing maturin, pytest, mcp and gymnasium from PyPI into $PY_VENV"
    python3 -m venv "$PY_VENV"
    "$PY_VENV/bin/pip" install -q --disable-pip-version-check $PY_PKGS
  fi
}

# The pincer-bench wheel from this checkout's binaries in target/$1 (debug, release), built
# with Cargo profile $2 (dev, release) into target/wheels/$2; prints its path.
wheel() {
  mkdir -p python/pincer_bench/bin
  cp "target/$1/pincer" "target/$1/pincer-agent" "target/$1/pincer-screencast" python/pincer_bench/bin/
  "$PY_VENV/bin/maturin" build -q -m python/Cargo.toml --profile "$2" --auditwheel skip \
    --out "target/wheels/$2" >&2
  ls -t "target/wheels/$2"/pincer_bench-*.whl | head -n 1
}

case "${1:-}" in
  deps) deps $WAYLAND_PKGS $VM_PKGS $ANDROID_PKGS $SLURM_PKGS; vm_deps ;;
  shim)
    deps $ANDROID_PKGS
    shims --release
    for t in $SHIM_TARGETS; do ls -l "target/$t/release/pincer-shim"; done
    ;;
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
  wheel)
    deps python3-venv
    py_venv
    log "building release binaries and the wheel"
    cargo build --release -p pincer -p pincer-agent --bins
    whl=$(wheel release release)
    log "built $whl: install it with pip install $whl"
    ;;
  bench)
    deps $VM_PKGS $SLURM_PKGS
    vm_deps
    cargo build --release --workspace --bins
    P=./target/release/pincer
    export PINCER_STATE_DIR="${PINCER_STATE_DIR:-$PWD/target/bench-state}"
    export PINCER_ENVS="$PINCER_STATE_DIR/envs.toml"
    "$P" desktop down bench >/dev/null 2>&1 || true
    "$P" desktop up --name bench --size 1920x1080
    trap '"$P" desktop down bench; "$P" desktop down bench-wl >/dev/null 2>&1' EXIT
    "$P" launch --env bench -- gtk3-widget-factory
    for _ in $(seq 100); do
      "$P" tree --env bench --app widget-factory --format text 2>/dev/null | grep -q 'push button' && break
      sleep 0.2
    done
    log "latency of every call (--markdown for the README's table)"
    "$P" bench --env bench "${@:2}"
    log "UI trees of real apps, each alone on the desktop"
    "$P" exec --env bench -- pkill -x gtk3-widget-fac   # the kernel keeps 15 bytes of a name
    "$P" bench --env bench --apps-only "${@:2}"
    log "10,000 screenshots in a row: the agent's memory and file descriptors"
    "$P" bench --env bench --soak 10000 | tail -n 3
    log "video streams: the agent's CPU and the bytes a second at 5, 15 and 30 fps"
    "$P" bench --env bench --video
    log "a GNOME Wayland desktop (headless GNOME Shell): every call through Mutter's remote-desktop API"
    deps $WAYLAND_PKGS
    "$P" desktop down bench-wl >/dev/null 2>&1 || true
    "$P" desktop up --name bench-wl --session wayland --size 1920x1080
    "$P" launch --env bench-wl -- gtk3-widget-factory
    sleep 3
    "$P" bench --env bench-wl "${@:2}"
    "$P" desktop down bench-wl
    log "a sway desktop (headless, as a normal user): every call through wlroots' protocols"
    test_user
    sway_bench "$P" "${@:2}"
    log "the graph evaluator's host CPU per step"
    cargo bench -p pincer --bench evaluator
    log "the fault matrix: a bundled task, then the whole suite, through relays of loss, delay, rate, blackouts, a NAT rebinding and TCP faults; fresh connections (PINCER_FAULT_REPEATS task runs per fault, default 10)"
    cargo test -q --release -p pincer-tests --test faults -- --ignored --nocapture fault_matrix
    log "a VM of debian-12-minimal: up, reset, every call (builds the image first if needed)"
    "$P" image build debian-12-minimal
    "$P" vm bench --image debian-12-minimal
    log "the Android shim on a stand-in phone (Android's commands replayed): its overhead per call"
    phone_bin=$(./target/release/standin-phone)
    shim_dir="$PINCER_STATE_DIR/standin-phone"
    rm -rf "$shim_dir"
    PATH="$phone_bin:$PATH" ./target/release/pincer-shim --listen 127.0.0.1:0 --name phone \
      --state-dir "$shim_dir" --ready-file "$shim_dir/ready.json" --no-uinput 2>/dev/null &
    shim_pid=$!
    trap '"$P" desktop down bench; kill $shim_pid' EXIT
    for _ in $(seq 100); do [ -s "$shim_dir/ready.json" ] && break; sleep 0.1; done
    addr=$(sed 's/.*"addr":"\([^"]*\)".*/\1/' "$shim_dir/ready.json")
    "$P" env remove standin-phone >/dev/null 2>&1 || true
    "$P" env add standin-phone "$addr" --platform android --token-file "$shim_dir/token" --trust
    "$P" bench --env standin-phone "${@:2}"
    log "OSWorld: importing its 369 tasks, fetching from a loopback stand-in of its file host, and scoring a final state (pincer's getters + desktop-env's compare_table in the sandboxed worker)"
    "$P" osworld setup --python /usr/bin/python3 >/dev/null
    osw="$PINCER_STATE_DIR/osworld-bench"
    rm -rf "$osw"
    "$P" task import-osworld fixtures/osworld-2024/evaluation_examples --out "$osw/all" | tail -n 2
    python3 tests/osworld/fetch_bench.py "$P" "$osw/fetch" 20 5000000
    scorer=$("$P" osworld doctor | sed -n 's/^scorer environment: //p')
    printf '%s\n' \
      "{\"op\":\"prepare\",\"out\":\"$osw/lab\",\"fixture\":\"$PWD/fixtures/osworld-2024/evaluation_examples\"}" \
      "{\"op\":\"make\",\"case\":\"table-same\",\"home\":\"$PINCER_STATE_DIR/desktops/bench/home\",\"assets\":\"$osw/cache\"}" \
      | "$scorer/bin/python" tests/osworld/lab.py >/dev/null
    "$P" task import-osworld "$osw/lab" --out "$osw/tasks" --assets "$osw/cache" >/dev/null
    "$P" task check --bind desktop=bench --tasks "$osw/tasks" --assets "$osw/cache" --no-setup \
      --repeat 50 libreoffice_calc/4172ea6e-6b77-4edb-a9cc-c0014bd1603b | tail -n 1
    log "OSWorld's offline tasks (osworld-offline) on the osworld image: the oracle (expect every score 1.0), then untouched and the random agent (expect none)"
    "$P" image build osworld
    "$P" run --tasks osworld-offline --vm osworld --agent oracle \
      --out "$osw/offline-oracle" --no-report | tail -n 5
    python3 tests/osworld/campaign_stats.py "$osw/offline-oracle/results.jsonl"
    # Untouched: each task with an oracle that says it is done before acting (expect none).
    python3 -c 'import json, pathlib, sys
for f in pathlib.Path("tasks/osworld-offline").glob("*/*.json"):
    t = json.loads(f.read_text()); t["oracle"] = [{"do": "complete"}]
    out = pathlib.Path(sys.argv[1], f.parent.name, f.name); out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(t))' "$osw/untouched"
    "$P" run --tasks "$osw/untouched" --vm osworld --agent oracle \
      --out "$osw/offline-untouched" --no-report | tail -n 5
    python3 tests/osworld/campaign_stats.py "$osw/offline-untouched/results.jsonl"
    "$P" run --tasks osworld-offline --vm osworld --agent random \
      --out "$osw/offline-random" --no-report | tail -n 5
    python3 tests/osworld/campaign_stats.py "$osw/offline-random/results.jsonl"
    log "CRAB's Ubuntu tasks on the crab image: every imported task whose templates all have oracles (expect each to pass), then the random agent (expect none)"
    "$P" image build crab
    crab="$PINCER_STATE_DIR/crab-bench"
    rm -rf "$crab"
    "$P" task import-crab fixtures/crab-benchmark-v0 --out "$crab/all" | tail -n 1
    python3 -c 'import json, pathlib, shutil, sys
for f in pathlib.Path(sys.argv[1], "ubuntu").glob("*.json"):
    if json.loads(f.read_text()).get("oracle"):
        out = pathlib.Path(sys.argv[2], f.name); out.parent.mkdir(parents=True, exist_ok=True); shutil.copy(f, out)' \
      "$crab/all" "$crab/solvable"
    "$P" run --tasks "$crab/solvable" --vm crab --agent oracle --out "$crab/oracle" --no-report | tail -n 7
    "$P" run --tasks "$crab/solvable" --vm crab --agent random --out "$crab/random" --no-report | tail -n 7
    log "the bundled suite with the oracle: one machine, then 3 shards on a local Slurm cluster"
    runs="$PINCER_STATE_DIR/runs-$(date +%s)"
    start=$(date +%s.%N)
    "$P" run --tasks demo --agent oracle --out "$runs/one" --no-report | tail -n 4
    one=$(echo "$(date +%s.%N) - $start" | bc)
    coproc CLUSTER { ./target/release/slurm-cluster; }
    read -r conf <&"${CLUSTER[0]}"
    start=$(date +%s.%N)
    SLURM_CONF="$conf" "$P" run --tasks demo --agent oracle --out "$runs/slurm" --slurm --shards 3 \
      --no-report | tail -n 6
    three=$(echo "$(date +%s.%N) - $start" | bc)
    exec {CLUSTER[1]}>&-
    wait "$CLUSTER_PID" 2>/dev/null || true
    printf 'the bundled suite: one machine %.1f s, 3 Slurm nodes on this machine %.1f s\n' "$one" "$three"
    log "the Python interface and the MCP server: what they add per step (release wheel)"
    py_venv
    "$PY_VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
      "$(wheel release release)"
    "$PY_VENV/bin/python" python/bench/overhead.py
    ;;
  test)
    deps $WAYLAND_PKGS $VM_PKGS $ANDROID_PKGS $SLURM_PKGS
    vm_deps
    test_user
    lint_tools
    log "checking formatting (cargo fmt --check)"
    cargo fmt --all --check
    log "building"
    cargo build --workspace --exclude pincer-python --bins --tests
    log "linting (cargo clippy --all-targets -D warnings)"
    cargo clippy --workspace --all-targets -- -D warnings
    shims ""
    log "OSWorld's scorer: desktop-env $(sed -n 's/^pub const DESKTOP_ENV: &str = "\(.*\)";/\1/p' host/src/peers/osworld/metric.rs) and its libraries from PyPI (once; cached in ~/.cache/pincer)"
    ./target/debug/pincer osworld setup --python /usr/bin/python3
    log "building the Python package and installing it into $PY_VENV"
    py_venv
    "$PY_VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps \
      "$(wheel debug dev)"
    log "running tests"
    cargo test --workspace --exclude pincer-python "${@:2}"
    log "running the Python package's tests (pytest, on the installed wheel)"
    "$PY_VENV/bin/python" -m pytest -q python/tests
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
