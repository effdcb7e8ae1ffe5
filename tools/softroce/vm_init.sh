#!/bin/busybox sh
# /init of the soft-RoCE VM's initramfs (made by vm_run.sh): mounts the
# host's root over 9p, gives it fresh /proc, /sys, /dev, /dev/shm, /run (/tmp
# stays the host's: runfiles may point into a clone there), then runs the
# job script named on the kernel command line (ps_vm_job=) inside it.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
         9pnet 9pnet_virtio netfs fscache 9p; do
    [ -f /mods/$m.ko ] && insmod /mods/$m.ko
done
r=/newroot
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=none hostroot $r; then
    echo "softroce vm: the host's root did not mount"
    poweroff -f
fi
mount -t proc proc $r/proc
mount -t sysfs sys $r/sys
mount -t devtmpfs dev $r/dev
mkdir -p $r/dev/shm $r/dev/pts
mount -t tmpfs shm $r/dev/shm
mount -t devpts pts $r/dev/pts
mount -t tmpfs run $r/run
job=$(sed -n 's/.*ps_vm_job=\([^ ]*\).*/\1/p' /proc/cmdline)
chroot $r /bin/bash "$job/guest.sh"
sync
poweroff -f
