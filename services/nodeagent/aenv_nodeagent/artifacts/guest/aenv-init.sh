#!/opt/aenv/bin/busybox sh
# PID 1 of every aenv guest (exec'd by the initramfs after switch_root). Runs from the read-only
# tools disk, so it works in any rootfs (glibc, musl, or no libc at all): every tool it needs is
# the tools disk's static busybox. It mounts the kernel filesystems, then execs tini (zombie
# reaping, signal forwarding) -> envd on the bundled Python.
A=/opt/aenv
BB=$A/bin/busybox

log() { $BB echo "aenv-init: $*" >/dev/console; }

mnt() {  # fstype mountpoint options; skips what is already mounted (e.g. /dev, moved in)
    $BB mkdir -p "$2"
    $BB grep -qs "^[^ ]* $2 " /proc/mounts || $BB mount -t "$1" -o "$3" "$1" "$2" || log "cannot mount $2"
}

mnt proc /proc nosuid,nodev,noexec
mnt sysfs /sys nosuid,nodev,noexec
mnt devtmpfs /dev nosuid,mode=0755
mnt devpts /dev/pts nosuid,noexec,gid=5,mode=0620,ptmxmode=0666
mnt tmpfs /dev/shm nosuid,nodev,mode=1777
mnt tmpfs /run nosuid,nodev,mode=0755
mnt cgroup2 /sys/fs/cgroup nosuid,nodev,noexec
[ -e /dev/fd ] || $BB ln -s /proc/self/fd /dev/fd
[ -e /dev/stdin ] || $BB ln -s /proc/self/fd/0 /dev/stdin
[ -e /dev/stdout ] || $BB ln -s /proc/self/fd/1 /dev/stdout
[ -e /dev/stderr ] || $BB ln -s /proc/self/fd/2 /dev/stderr
$BB mkdir -p /tmp && $BB chmod 1777 /tmp

log "starting envd"
# Only what envd itself needs: PYTHONHOME and the bundled loader are envd's private runtime and
# must not leak into the processes it spawns (envd builds its children's environment itself).
exec $BB env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 \
    PYTHONHOME=$A PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    AENV_TOOLS_DIR=$A AENV_ENVD_INIT_MARKER=/run/aenv/envd-init \
    $A/bin/tini-static -s -- \
    $A/lib/ld-linux-x86-64.so.2 --library-path $A/lib $A/bin/python3 -m @ENVD_MODULE@ \
    </dev/null >/dev/console 2>&1
