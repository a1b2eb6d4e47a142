#!/bin/bash
# The impairment appliance's init (testbed/links/appliance.py): runs as PID 1 of the user-mode Linux kernel,
# on the host's file system mounted read-only through hostfs. It loads the qdisc modules, brings the ports up,
# then carries out the control channel's requests: the appliance's folder on the host, mounted read-write at
# /ctl, where a request is a script `<tag>.req`, answered by `<tag>.out` (its output) and `<tag>.rc` (its exit
# status, written last).
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t tmpfs run /run
mkdir -p /run/m/lib/modules /run/ctl
mount --bind "$TBED_UML_MODULES" /run/m/lib/modules
modprobe --dirname=/run/m -a ${TBED_UML_QDISCS//,/ } 2>/run/modprobe.err
modules=$?
# a port opens its tap (creating it on the host) when it goes up
for d in /sys/class/net/vec*; do ip link set dev "${d##*/}" up; done
mount -t hostfs -o "$TBED_CONTROL_DIR" none /run/ctl
# the doorbell: the host writes a line to serial line 1 after each request (UML's line driver garbles bursts
# of data, so only the wake-up goes this way); a request is also found within a second without it
exec 5<>/dev/ttyS1
stty raw -echo <&5
echo "$(uname -r) modules=$modules $(tr '\n' ' ' </run/modprobe.err)" >/run/ctl/ready.tmp
mv /run/ctl/ready.tmp /run/ctl/ready
shopt -s nullglob
while :; do
  for req in /run/ctl/*.req; do
    tag=${req%.req}
    ( . "$req" ) >"$tag.out" 2>&1 5>&-
    echo $? >"$tag.rc.tmp"
    rm -f "$req"
    mv "$tag.rc.tmp" "$tag.rc"
  done
  read -r -t 1 -u 5
done
