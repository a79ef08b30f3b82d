#!/bin/sh
# Run by `pincer image import` inside the user's disk (libguestfs chroots into it), after it
# put pincer's guest files in place (see images/guest/README.md): adapts them to the user
# whose desktop the agent drives, enables them, and writes what the image's manifest records
# to /tmp/pincer-import.facts, one fact per line:
#   user NAME   os ID RELEASE   kernel VERSION   session HOW   package NAME VERSION
# An error line starts with "pincer-import: " and says what to do.
set -eu
user=${1:-}
facts=/tmp/pincer-import.facts
[ -n "$user" ] || {
  echo "pincer-import: the disk has no user with uid 1000: pass --user with the user whose desktop session the agent drives" >&2
  exit 1
}
command -v systemctl >/dev/null 2>&1 || {
  echo "pincer-import: the disk has no systemd: pincer's guest services are systemd units" >&2
  exit 1
}
entry=$(getent passwd "$user") || {
  echo "pincer-import: the disk has no user '$user': pass --user with the user whose desktop session the agent drives (the disk's users: $(awk -F: '$3 >= 1000 && $3 < 60000 {printf "%s ", $1}' /etc/passwd))" >&2
  exit 1
}
uid=$(echo "$entry" | cut -d: -f3)
# The agent's disk is installed for this user before any session of theirs starts; an
# imported disk boots through its own bootloader, so no kernel argument marks it.
sed -i -e "s/user@1000\.service/user@$uid.service/" -e '/^ConditionKernelCommandLine=/d' \
  /etc/systemd/system/pincer-agent-disk.service
sed -i "s/getent passwd 1000/getent passwd $uid/g" /usr/local/sbin/pincer-agent-disk
systemctl enable pincer-clock.service pincer-agent-disk.service >/dev/null 2>&1
systemctl --global enable pincer-agent.service >/dev/null 2>&1

. /etc/os-release
{
  echo "user $user"
  echo "os ${ID:-linux} ${VERSION_CODENAME:-${VERSION_ID:-unknown}}"
  echo "kernel $(ls /lib/modules 2>/dev/null | sort -V | tail -n 1)"
  # How the user's graphical session starts at boot (the agent starts with it).
  session=none
  for f in /etc/gdm3/custom.conf /etc/gdm/custom.conf; do
    if [ -f "$f" ] && grep -Eiq '^[[:space:]]*AutomaticLoginEnable[[:space:]]*=[[:space:]]*true' "$f" &&
      grep -Eq "^[[:space:]]*AutomaticLogin[[:space:]]*=[[:space:]]*$user[[:space:]]*$" "$f"; then
      session=gdm-autologin
    fi
  done
  if [ "$session" = none ] && grep -Eqs "^[[:space:]]*autologin-user[[:space:]]*=[[:space:]]*$user[[:space:]]*$" /etc/lightdm/lightdm.conf /etc/lightdm/lightdm.conf.d/*.conf; then
    session=lightdm-autologin
  fi
  if [ "$session" = none ] && grep -Eqs "^[[:space:]]*User[[:space:]]*=[[:space:]]*$user[[:space:]]*$" /etc/sddm.conf /etc/sddm.conf.d/*.conf; then
    session=sddm-autologin
  fi
  if [ "$session" = none ] && [ -e "/var/lib/systemd/linger/$user" ]; then
    session=linger
  fi
  echo "session $session"
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='package ${Package} ${Version}\n'
  elif command -v rpm >/dev/null 2>&1; then
    rpm -qa --qf 'package %{NAME} %{VERSION}-%{RELEASE}\n'
  fi
} >"$facts"
