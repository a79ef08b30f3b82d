#!/usr/bin/env bash
# A stand-in for a user's own VM disk (OSWorld's Ubuntu.qcow2, a lab's prepared machine):
# Debian 12 booted by its own GRUB, for BIOS or UEFI, with a user `alex` whose desktop
# session (Xvfb and openbox, started at boot as a logged-in session would be) runs zenity,
# DHCP on its network card, and no pincer inside. Built without root or loop mounts:
# mmdebstrap makes the root file system as a tarball, libguestfs partitions the disk, copies
# it in and runs the guest's own grub-install and update-grub.
#
#   tests/images/standin-disk.sh OUT.qcow2 bios|uefi
set -euo pipefail
out=$1
firmware=$2
case $firmware in bios | uefi) ;; *) echo "firmware: bios or uefi, not '$firmware'" >&2; exit 2 ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The user's session: an X server, a window manager with a background colour and a dialog,
# started by the user's systemd at boot (lingering), bound to graphical-session.target as
# GNOME's session is.
files=$work/files
mkdir -p "$files/etc/systemd/user" "$files/etc/systemd/user.conf.d" "$files/etc/systemd/network" "$files/etc/default" "$files/var/lib/systemd/linger"
cat >"$files/etc/systemd/user/desktop.target" <<'EOF'
[Unit]
Description=The user's desktop session
BindsTo=graphical-session.target
Wants=desktop-x.service desktop-wm.service desktop-hello.service
After=desktop-x.service

[Install]
WantedBy=default.target
EOF
cat >"$files/etc/systemd/user/desktop-x.service" <<'EOF'
[Unit]
Description=X server of the desktop session
Before=graphical-session.target

[Service]
ExecStart=/usr/bin/Xvfb :0 -screen 0 1280x800x24 -nolisten tcp
ExecStartPost=/bin/sh -c 'while [ ! -S /tmp/.X11-unix/X0 ]; do sleep 0.05; done'
EOF
cat >"$files/etc/systemd/user/desktop-wm.service" <<'EOF'
[Unit]
Description=Window manager of the desktop session
After=desktop-x.service
PartOf=graphical-session.target

[Service]
ExecStart=/usr/bin/openbox
ExecStartPost=/bin/sh -c 'sleep 1; xsetroot -solid "#204a87"'
EOF
cat >"$files/etc/systemd/user/desktop-hello.service" <<'EOF'
[Unit]
Description=A dialog on the desktop
After=desktop-wm.service
PartOf=graphical-session.target

[Service]
ExecStart=/usr/bin/zenity --info --text "the user's own desktop"
EOF
printf '[Manager]\nDefaultEnvironment=DISPLAY=:0\n' >"$files/etc/systemd/user.conf.d/display.conf"
printf '[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n' >"$files/etc/systemd/network/20-dhcp.network"
printf 'GRUB_DEFAULT=0\nGRUB_TIMEOUT=0\nGRUB_DISTRIBUTOR=Debian\nGRUB_CMDLINE_LINUX="console=ttyS0"\nGRUB_DISABLE_OS_PROBER=true\n' >"$files/etc/default/grub"
: >"$files/var/lib/systemd/linger/alex"
echo standin >"$files/etc/hostname"
if [ "$firmware" = uefi ]; then
  printf 'LABEL=root / ext4 errors=remount-ro 0 1\nLABEL=EFI /boot/efi vfat umask=0077 0 1\n' >"$files/etc/fstab"
else
  printf 'LABEL=root / ext4 errors=remount-ro 0 1\n' >"$files/etc/fstab"
fi

echo "standin-disk: the root file system (mmdebstrap)" >&2
mmdebstrap --quiet --variant=apt \
  --include=linux-image-amd64,initramfs-tools,grub-pc-bin,grub-efi-amd64-bin,grub2-common,systemd-sysv,udev,kmod,dbus,dbus-user-session,xvfb,xauth,x11-xserver-utils,openbox,at-spi2-core,libatk-adaptor,zenity \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook="sync-in $files /" \
  --customize-hook='chroot "$1" useradd -m -s /bin/bash alex' \
  --customize-hook='chroot "$1" systemctl enable systemd-networkd.service' \
  --customize-hook='chroot "$1" systemctl --global enable desktop.target' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  bookworm "$work/root.tar"

echo "standin-disk: the disk and its bootloader (guestfish, $firmware)" >&2
export LIBGUESTFS_BACKEND=direct
# /dev/kvm without hardware virtualization (this machine) hangs or aborts QEMU under KVM.
grep -qE '\b(vmx|svm)\b' /proc/cpuinfo || export LIBGUESTFS_BACKEND_SETTINGS=force_tcg
truncate -s 3G "$work/disk.raw"
if [ "$firmware" = uefi ]; then
  guestfish --rw -a "$work/disk.raw" <<EOF
run
part-init /dev/sda gpt
part-add /dev/sda p 2048 264191
part-add /dev/sda p 264192 -34
part-set-gpt-type /dev/sda 1 C12A7328-F81F-11D2-BA4B-00A0C93EC93B
mkfs vfat /dev/sda1 label:EFI
mkfs ext4 /dev/sda2 label:root
mount /dev/sda2 /
tar-in $work/root.tar / xattrs:true
mkdir-p /boot/efi
mount /dev/sda1 /boot/efi
command "grub-install --target=x86_64-efi --efi-directory=/boot/efi --removable --no-nvram"
command "update-grub"
EOF
else
  guestfish --rw -a "$work/disk.raw" <<EOF
run
part-init /dev/sda mbr
part-add /dev/sda p 2048 -1
part-set-bootable /dev/sda 1 true
mkfs ext4 /dev/sda1 label:root
mount /dev/sda1 /
tar-in $work/root.tar / xattrs:true
command "grub-install --target=i386-pc /dev/sda"
command "update-grub"
EOF
fi
qemu-img convert -O qcow2 "$work/disk.raw" "$out"
echo "standin-disk: $out ($(du -h "$out" | cut -f1))" >&2
