#!/bin/sh
# The overhead of one ADD through ipam-delegated with one trivial delegate,
# against that delegate called directly: medians of sequential runs (hyperfine).
# Usage: scripts/overhead.sh [runs]   (builds the release binaries first)
set -eu
runs=${1:-300}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
CARGO_TARGET_DIR=$target cargo build --quiet --release --workspace --manifest-path "$root/Cargo.toml"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A trivial delegate: prints a fixed 1.0.0 result, ignores its input.
cat > "$work/trivial.c" <<'C'
#include <stdio.h>
int main(void) {
    fputs("{\"cniVersion\":\"1.0.0\",\"ips\":[{\"address\":\"10.0.0.2/24\"}],\"routes\":[],\"dns\":{}}\n", stdout);
    return 0;
}
C
# hyperfine 1.15 has no --input: both commands run through this launcher,
# which puts the configuration on stdin and execs the program (same cost for both).
cat > "$work/stdin-from.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int fd = argc > 2 ? open(argv[1], O_RDONLY) : -1;
    if (fd < 0 || dup2(fd, 0) < 0) { perror("stdin-from FILE PROGRAM"); return 127; }
    execv(argv[2], argv + 2);
    perror(argv[2]);
    return 127;
}
C
mkdir "$work/bin"
gcc -O2 -o "$work/bin/ipam-da-trivial" "$work/trivial.c"
gcc -O2 -o "$work/stdin-from" "$work/stdin-from.c"
printf '%s' '{"cniVersion":"1.0.0","name":"bench","type":"bridge","ipam":{"type":"ipam-delegated","delegates":["ipam-da-trivial"]}}' > "$work/conf.json"
export CNI_COMMAND=ADD CNI_CONTAINERID=bench CNI_NETNS=/var/run/netns/bench CNI_IFNAME=eth0 CNI_PATH="$work/bin"
hyperfine -N --warmup 20 --runs "$runs" --export-json "$work/result.json" \
    -n direct "$work/stdin-from $work/conf.json $work/bin/ipam-da-trivial" \
    -n delegated "$work/stdin-from $work/conf.json $target/release/ipam-delegated"
python3 -c '
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print("%-10s median %.3f ms (min %.3f, max %.3f, %d runs)" % (r["command"], r["median"] * 1e3, r["min"] * 1e3, r["max"] * 1e3, len(r["times"])))
' "$work/result.json"
