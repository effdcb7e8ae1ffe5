#!/bin/bash
# Runs a command in a small VM whose kernel has a soft-RoCE (rdma_rxe) device,
# so the ibverbs van's hardware tests run on a host without an RDMA NIC or
# without rdma_rxe in its own kernel:
#
#   bazel test --config=softroce //tests/rdma/verbs:all //tests/auth:strangers_ibverbs_test
#   tools/softroce/vm_run.sh CMD [ARGS...]
#
# The VM (qemu, software emulation) boots a Debian kernel from /boot with the
# host's root file system over 9p, writable, so the command sees the same
# files, binaries and libraries at the same paths. Inside, it makes rxe0 on a
# veth end with address 10.77.0.1, raises the memlock limit, then runs CMD in
# the caller's environment and folder. The exit status is CMD's; 125 when the
# VM could not run it.
#
# Needs (tools/install_deps.sh softroce): qemu-system-x86, a linux-image
# with its modules under /lib/modules, busybox-static, rdma-core.
# PS_SOFTROCE_MEM sets the VM's memory (default 4G), PS_SOFTROCE_ACCEL
# qemu's accelerator (default tcg: KVM inside another VM may hang at boot),
# PS_SOFTROCE_TIMEOUT_S how long the VM may run in all (default 3600; then
# it is killed and the exit status is 124).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "softroce vm: $*" >&2; exit 125; }
[ $# -ge 1 ] || die "usage: vm_run.sh CMD [ARGS...]"

qemu=$(command -v qemu-system-x86_64) || die "qemu-system-x86_64 not found (apt-get install qemu-system-x86)"
busybox=/bin/busybox
# A dynamic busybox cannot run in the initramfs: it has no loader there.
[ -x "$busybox" ] && ! readelf -l "$busybox" 2>/dev/null | grep -q INTERP ||
    die "$busybox is not the static busybox (apt-get install busybox-static)"
command -v rdma > /dev/null || die "the rdma tool is missing (apt-get install iproute2)"

# The newest kernel in /boot whose modules include rdma_rxe.
kver=
for k in $(ls /boot/vmlinuz-* 2>/dev/null | sort -rV); do
    v=${k#/boot/vmlinuz-}
    if [ -f "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ]; then
        kver=$v
        break
    fi
done
[ -n "$kver" ] || die "no kernel in /boot with rdma_rxe among its modules (apt-get install linux-image-amd64)"

# The initramfs: busybox, the 9p modules, vm_init.sh. Made once per kernel.
cache=${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ps-softroce/$kver
initrd=$cache/initrd.gz
if [ ! -s "$initrd" ] || [ "$here/vm_init.sh" -nt "$initrd" ]; then
    mkdir -p "$cache" || die "cannot make $cache"
    root=$(mktemp -d) || die "mktemp failed"
    mkdir -p "$root/bin" "$root/mods" "$root/newroot" "$root/proc" "$root/sys" "$root/dev"
    cp "$busybox" "$root/bin/busybox"
    cp "$here/vm_init.sh" "$root/init"
    chmod 755 "$root/init"
    m=/lib/modules/$kver/kernel
    for f in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_legacy_dev \
             drivers/virtio/virtio_pci_modern_dev drivers/virtio/virtio_pci net/9p/9pnet \
             net/9p/9pnet_virtio fs/netfs/netfs fs/fscache/fscache fs/9p/9p; do
        # Some are built into the kernel; only the modules need copying.
        [ -f "$m/$f.ko" ] && cp "$m/$f.ko" "$root/mods/"
    done
    (cd "$root" && find . | cpio -o -H newc 2> /dev/null | gzip -1) > "$initrd.tmp" &&
        mv "$initrd.tmp" "$initrd"
    rm -rf "$root"
    [ -s "$initrd" ] || die "could not write $initrd"
fi

# The job folder, on the shared root.
base=${TEST_TMPDIR:-${TMPDIR:-/tmp}}
job=$(mktemp -d "$base/softroce.XXXXXX") || die "mktemp in $base failed"
trap 'rm -rf "$job"' EXIT
cp "$here/guest.sh" "$job/guest.sh"
export -p > "$job/env.sh"
pwd > "$job/cwd"
{
    echo '#!/bin/bash'
    printf 'exec'
    printf ' %q' "$@"
    echo
} > "$job/cmd.sh"
chmod 755 "$job/guest.sh" "$job/cmd.sh"

ncpu=$(nproc)
accel=${PS_SOFTROCE_ACCEL:-tcg}
case "$accel" in tcg) accel_opt=tcg,thread=multi; cpu=max ;; *) accel_opt=$accel; cpu=host ;; esac
# The console is this command's output; the firmware's lines before the
# guest's first line are dropped.
limit=${PS_SOFTROCE_TIMEOUT_S:-3600}
[[ "$limit" =~ ^[1-9][0-9]*$ ]] || die "PS_SOFTROCE_TIMEOUT_S=$limit is not a positive number of seconds"
timeout --kill-after=10 "$limit" \
"$qemu" -accel "$accel_opt" -cpu "$cpu" -m "${PS_SOFTROCE_MEM:-4G}" -smp "$ncpu" \
    -display none -monitor none -serial stdio -no-reboot -nodefaults \
    -kernel "/boot/vmlinuz-$kver" -initrd "$initrd" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 ps_vm_job=$job" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,multidevs=remap \
    < /dev/null 2>&1 | tr -d '\r' | awk '/^softroce vm: |^\[ *[0-9.]+\]/ {on = 1} on && !/reboot: Power down/ {print; fflush()}'
vm_rc=${PIPESTATUS[0]}
if [ "$vm_rc" -eq 124 ] || [ "$vm_rc" -eq 137 ]; then
    echo "softroce vm: killed after ${limit} s (PS_SOFTROCE_TIMEOUT_S)" >&2
    exit 124
fi
[ -s "$job/rc" ] || die "the VM ended without the command's exit status"
exit "$(cat "$job/rc")"
