#!/bin/bash
# Runs inside the soft-RoCE VM (copied into the job folder by vm_run.sh):
# makes an RDMA device, then runs the command in the caller's environment
# and folder, and leaves its exit status in the job folder.
job=$(dirname "$0")
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "softroce vm: $*"; echo 125 > "$job/rc"; exit 0; }
# rdma_rxe computes its ICRC with the kernel's crc32 (a module in Debian's build).
for m in crc32_generic crc32-pclmul rdma_rxe rdma_ucm veth; do
    modprobe "$m" 2>/dev/null
done
lsmod | grep -q '^rdma_rxe' || fail "rdma_rxe did not load"
ip link set lo up
# One end of a veth pair carries the device; the other end only keeps the
# link up. Every process of a job uses the one address, as on a one-NIC host.
ip link add rxe_a type veth peer name rxe_b || fail "no veth pair"
ip addr add 10.77.0.1/24 dev rxe_a
ip link set rxe_b up
ip link set rxe_a up
rdma link add rxe0 type rxe netdev rxe_a || fail "rdma link add failed (see dmesg)"
ulimit -l unlimited
ulimit -n 65536
# The caller's environment, folder and command.
source "$job/env.sh"
cd "$(cat "$job/cwd")" || fail "no folder $(cat "$job/cwd")"
echo "softroce vm: rxe0 on 10.77.0.1, running $(head -c 200 "$job/cmd.sh" | tail -n +2)"
"$job/cmd.sh"
echo $? > "$job/rc"
