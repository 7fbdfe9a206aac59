#!/bin/busybox sh
# aenv initramfs /init: load the virtio drivers, mount the root and tools disks, configure the
# network, then hand over to the tools disk's PID 1 (aenv-init) inside the root filesystem.
# Parameters come from the kernel command line (aenv.*=), with production defaults.
export PATH=/bin

fail() {
    echo "aenv-initramfs: FATAL: $*"
    poweroff -f  # ACPI power-off: QEMU exits instead of hanging on a dead guest
}

mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

root_dev=/dev/vda
tools_dev=/dev/vdb
address=169.254.0.21/30
gateway=169.254.0.22
name=aenv
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        aenv.root=*) root_dev="${arg#*=}" ;;
        aenv.tools=*) tools_dev="${arg#*=}" ;;
        aenv.ip=*) address="${arg#*=}" ;;
        aenv.gw=*) gateway="${arg#*=}" ;;
        aenv.hostname=*) name="${arg#*=}" ;;
        aenv.debug=1) set -x ;;
    esac
done

# Dependency order, computed at build time from the modules' own "depends=" lists.
for module in @MODULES@; do
    insmod "/lib/modules/$module.ko" || fail "insmod $module"
done

tries=0
while [ ! -b "$root_dev" ] || [ ! -b "$tools_dev" ]; do
    tries=$((tries + 1))
    [ "$tries" -gt 1000 ] && fail "no $root_dev or $tools_dev after 10 s"
    usleep 10000
done

mount -t ext4 -o rw,noatime "$root_dev" /newroot || fail "mount root $root_dev"
mkdir -p /newroot/opt/aenv /newroot/dev /newroot/proc /newroot/sys
mount -t ext4 -o ro,noatime "$tools_dev" /newroot/opt/aenv || fail "mount tools $tools_dev"

ip link set lo up
if [ -e /sys/class/net/eth0 ]; then
    ip link set eth0 up
    ip addr add "$address" dev eth0 || fail "ip addr $address"
    ip route add default via "$gateway" || fail "ip route via $gateway"
fi
hostname "$name"

mount -o move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /opt/aenv/bin/aenv-init
