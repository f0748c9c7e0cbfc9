package main

// serve: an embedded etcd on 127.0.0.1 and kube-apiserver against it, in
// this one process, serving https://127.0.0.1:PORT with
//   - the authorization modes of a real cluster: Node and RBAC, no
//     AlwaysAllow, so every request of a non-admin is judged by RBAC;
//   - ServiceAccount tokens issued (TokenRequest) and accepted;
//   - an admin (client certificate in group system:masters) whose
//     kubeconfig is DIR/admin.kubeconfig.
// Everything lives in DIR: the certificates and keys (made on the first
// start, kept afterwards, so that a restart on the same DIR keeps the CA and
// every token issued), etcd's data and its ports. When /readyz answers ok,
// DIR/ready is written (and "ready" printed); a start removes it first.
// Stopped by a signal (the tests kill its process group).

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

// The Service range of the cluster: test addresses stay in 10.0.0.0/8.
const serviceRange = "10.96.0.0/16"

// The issuer of ServiceAccount tokens, as in a kubeadm cluster.
const issuer = "https://kubernetes.default.svc.cluster.local"

func serve(args []string) error {
	flags := flag.NewFlagSet("serve", flag.ContinueOnError)
	dir := flags.String("data-dir", "", "the directory of the certificates, keys, etcd's data and the kubeconfig")
	port := flags.Int("port", 0, "the API server's port on 127.0.0.1")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *port <= 0 || *port > 65535 || flags.NArg() != 0 {
		return errors.New("usage: serve --data-dir DIR --port PORT")
	}
	ready := filepath.Join(*dir, "ready")
	if err := os.Remove(ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	pki, err := ensurePKI(filepath.Join(*dir, "pki"))
	if err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", *port)
	admin := filepath.Join(*dir, "admin.kubeconfig")
	if err := writeKubeconfig(admin, server, pki.caPEM, user{certFile: pki.adminCert, keyFile: pki.adminKey}); err != nil {
		return err
	}

	etcd, err := startEtcd(*dir)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	apiserver := app.NewAPIServerCommand()
	apiserver.SetArgs([]string{
		"--etcd-servers=" + etcd.Clients[0].Addr().String(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(*port),
		"--advertise-address=127.0.0.1",
		// No "kubernetes" Service endpoints: 127.0.0.1 is not a valid
		// endpoint address, and nothing here reaches the API through it.
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + pki.serverCert,
		"--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caCert,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=" + serviceRange,
		"--profiling=false",
	})
	failed := make(chan error, 1)
	go func() { failed <- apiserver.Execute() }()

	go announceReady(server, pki, ready)
	select {
	case err := <-failed:
		return fmt.Errorf("kube-apiserver: %v", err)
	case err := <-etcd.Err():
		return fmt.Errorf("etcd: %v", err)
	}
}

// startEtcd starts one etcd member with its data in DIR/etcd, on the ports of
// DIR/etcd-ports (two free ones chosen on the first start, the same after).
// No fsync: a killed process loses nothing (the kernel has the writes); only
// a crash of the machine would, and the tests' data is temporary.
func startEtcd(dir string) (*embed.Etcd, error) {
	client, peer, err := etcdPorts(filepath.Join(dir, "etcd-ports"))
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "kube-test"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	// NewConfig leaves these 0, and etcd then logs every request as slow.
	cfg.WarningApplyDuration = embed.DefaultWarningApplyDuration
	cfg.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	cfg.UnsafeNoFsync = true
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(client))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peer))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{clientURL}, []url.URL{clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peerURL}, []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("not ready within 60 s")
	}
}

// etcdPorts reads "CLIENT PEER" from file, or chooses two free ports and
// writes them there.
func etcdPorts(file string) (int, int, error) {
	if text, err := os.ReadFile(file); err == nil {
		var client, peer int
		if _, err := fmt.Sscanf(string(text), "%d %d", &client, &peer); err != nil {
			return 0, 0, fmt.Errorf("%s: %v", file, err)
		}
		return client, peer, nil
	}
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports[0], ports[1], os.WriteFile(file, fmt.Appendf(nil, "%d %d\n", ports[0], ports[1]), 0o644)
}

// announceReady polls /readyz as the admin until it answers ok, then writes
// the file `ready` (whole, by a rename) and prints "ready".
func announceReady(server string, pki *pki, ready string) {
	cert, err := tls.LoadX509KeyPair(pki.adminCert, pki.adminKey)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-test-server: the admin's certificate: %v\n", err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.caPEM)
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}},
	}
	for {
		resp, err := client.Get(server + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := writeWhole(ready, []byte(strings.TrimPrefix(server, "https://")+"\n"), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "kube-test-server: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("ready")
}

// writeWhole writes data to file through a temporary file and a rename, so
// that a reader never sees a part of it.
func writeWhole(file string, data []byte, mode os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
