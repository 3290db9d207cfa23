#!/bin/bash
# before/after for issue 24 items 1, 2, 5 with a given cpuwork binary
# usage: scripts/run-escape-demo.sh PATH-TO-CPUWORK (root); prints each probe's outcome
B=$1; P=cpuwork-demo-escape
rm -f /tmp/pids
$B run --parent $P -- sh -c 'sleep 100 & echo $! >> /tmp/pids; sleep 100 & echo $! >> /tmp/pids; wait' 2>/dev/null &
SUP=$!; sleep 0.5; kill -9 $SUP; sleep 0.3
echo "after SIGKILL: sleeps alive: $(for p in $(cat /tmp/pids); do [ -d /proc/$p ] && echo -n "$p "; done)"
$B run --parent $P -- true 2>&1 | grep -v "exited 0" 
echo "after next run: sleeps alive: $(for p in $(cat /tmp/pids); do [ -d /proc/$p ] && echo -n "$p "; done)"
echo "groups left: $(ls -d /sys/fs/cgroup/cpu/$P/* 2>/dev/null | grep run- ) parent left: $(ls -d /sys/fs/cgroup/cpu/$P 2>/dev/null)"
for p in $(cat /tmp/pids); do kill -9 $p 2>/dev/null; done; sleep 0.1
for d in /sys/fs/cgroup/cpu/$P/run-*; do rmdir $d 2>/dev/null; done; rmdir /sys/fs/cgroup/cpu/$P 2>/dev/null
echo "env leak: $($B run -- env 2>/dev/null | grep CPUWORK_RUN_PARENT)"
echo "--cpus 1000: $($B run --cpus 1000 -- true 2>&1 | head -c 200)"
