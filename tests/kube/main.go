// kube-test-server: a real kube-apiserver for the tests, over a real etcd,
// in one process, and the few client commands the tests need, so that they
// need no kubectl. Built by the tests (tests/support/go.rs) from this module,
// which pins k8s.io/kubernetes and everything it needs in go.mod and go.sum.
//
//	kube-test-server serve --data-dir DIR --port PORT
//	kube-test-server apply --kubeconfig FILE MANIFEST...
//	kube-test-server token --kubeconfig FILE --namespace NS --service-account NAME --out FILE [--seconds N]
//	kube-test-server request --kubeconfig FILE [--accept TYPE] [--content-type TYPE] METHOD PATH [BODY-FILE]
//	kube-test-server can-i --kubeconfig FILE VERB RESOURCE[.GROUP][/SUBRESOURCE] [--namespace NS] [--name NAME]
//
// serve: see serve.go. The client commands: see client.go. Each prints what
// went wrong on stderr and exits 1 on failure, 2 on a usage error.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	command, args := os.Args[1], os.Args[2:]
	var err error
	switch command {
	case "serve":
		err = serve(args)
	case "apply":
		err = apply(args)
	case "token":
		err = token(args)
	case "request":
		err = request(args)
	case "can-i":
		err = canI(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-test-server %s: %v\n", command, err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kube-test-server serve|apply|token|request|can-i ... (see tests/kube/main.go)")
	os.Exit(2)
}
