#!/bin/bash
# The 3×cat shell pipeline with each process in cgroups placed as codellm places a run's blocks (cgroup v1,
# root): MODE none | cpu-per | mem-per | all-per | all-per-5x (the parent weighs 5 tasks) | cpu-one.
# Prints MiB/s; removes its groups. BENCHMARKS.md "What this session changed" 2. quotes its runs.
N=$((1024*1024*1024))
MODE=$1
base=codellm-pipetest-$$
mk() { for c in $2; do mkdir -p /sys/fs/cgroup/$c/$base/$1; done; }
wrap() { # $1 group  $2.. command
  local g=$1; shift
  local cs=""
  case $MODE in
    none) ;;
    cpu-per) cs="cpu"; ;;
    mem-per) cs="memory"; ;;
    all-per) cs="memory pids cpu cpuacct freezer"; ;;
    cpu-one) cs="cpu"; g=one ;;
    all-per-5x) cs="memory pids cpu cpuacct freezer"; mkdir -p /sys/fs/cgroup/cpu/$base; echo 5120 > /sys/fs/cgroup/cpu/$base/cpu.shares ;;
  esac
  local s=""
  for c in $cs; do mkdir -p /sys/fs/cgroup/$c/$base/$g; s="$s echo \$\$ > /sys/fs/cgroup/$c/$base/$g/cgroup.procs;"; done
  echo "$s exec $*"
}
t0=$(date +%s.%N)
bash -c "$(wrap b1 head -c $N /dev/zero)" | bash -c "$(wrap b2 cat)" | bash -c "$(wrap b3 cat)" | bash -c "$(wrap b4 cat)" | bash -c "$(wrap b5 wc -c)" >/dev/null
t1=$(date +%s.%N)
echo "$MODE $(echo "1024 / ($t1 - $t0)" | bc -l | cut -c1-6) MiB/s"
for c in memory pids cpu cpuacct freezer; do for g in b1 b2 b3 b4 b5 one; do rmdir /sys/fs/cgroup/$c/$base/$g 2>/dev/null; done; rmdir /sys/fs/cgroup/$c/$base 2>/dev/null; done
