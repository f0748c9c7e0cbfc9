// libcni-run: the smallest container runtime for the end-to-end tests of
// tests/chain.rs. It runs one network configuration list through libcni,
// the CNI project's own runtime library (what containerd, CRI-O, podman's
// CNI backend and Multus embed), exactly as a runtime does: libcni chains
// the plugins (each one after the first gets the previous one's result as
// prevResult on ADD), caches the list's final result, and hands that cached
// result as prevResult to every plugin on CHECK and DEL.
//
//	libcni-run ADD|CHECK|DEL <conflist file> <container id> <netns path> <ifname>
//
// Plugins are looked up in $CNI_PATH (colon-separated); results are cached
// in $CNI_CACHE_DIR (required, so that a test never touches /var/lib/cni).
// ADD prints the list's result as JSON on stdout; CHECK and DEL print
// nothing. On failure it prints the error on stderr and, when the cause is a
// plugin's CNI error object, that object as JSON on stdout; it exits 1.
//
// Built by the test (tests/support/go.rs) from this module, whose go.mod and
// go.sum pin libcni's release; by hand, in this directory:
//
//	CGO_ENABLED=0 go build -o libcni-run .
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: libcni-run ADD|CHECK|DEL <conflist file> <container id> <netns path> <ifname>")
		os.Exit(2)
	}
	command, file, container, netns, ifname := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]

	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	if len(paths) == 0 {
		fail(errors.New("CNI_PATH is empty: it names the directories plugins are found in"))
	}
	cacheDir := os.Getenv("CNI_CACHE_DIR")
	if cacheDir == "" {
		fail(errors.New("CNI_CACHE_DIR is empty: it is where libcni caches results"))
	}
	list, err := libcni.ConfListFromFile(file)
	if err != nil {
		fail(fmt.Errorf("reading %s: %w", file, err))
	}

	cni := libcni.NewCNIConfigWithCacheDir(paths, cacheDir, nil)
	rt := &libcni.RuntimeConf{ContainerID: container, NetNS: netns, IfName: ifname}
	ctx := context.Background()

	switch command {
	case "ADD":
		result, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			fail(err)
		}
		out, err := json.Marshal(result)
		if err != nil {
			fail(fmt.Errorf("encoding the result: %w", err))
		}
		fmt.Println(string(out))
	case "CHECK":
		if err := cni.CheckNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	case "DEL":
		if err := cni.DelNetworkList(ctx, list, rt); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %q: ADD, CHECK or DEL", command))
	}
}

// fail prints err on stderr and, when its innermost cause encodes as a CNI
// error object (a plugin's {"code", "msg", "details"}), that object on
// stdout; then exits 1.
func fail(err error) {
	fmt.Fprintf(os.Stderr, "libcni-run: %v\n", err)
	cause := err
	for next := errors.Unwrap(cause); next != nil; next = errors.Unwrap(cause) {
		cause = next
	}
	if out, jerr := json.Marshal(cause); jerr == nil {
		var obj map[string]interface{}
		if json.Unmarshal(out, &obj) == nil {
			if _, ok := obj["code"]; ok {
				fmt.Println(string(out))
			}
		}
	}
	os.Exit(1)
}
