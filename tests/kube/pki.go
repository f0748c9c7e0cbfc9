package main

// The server's certificates and keys, made on the first start in one
// directory and read back on the next: a CA, the serving certificate of
// 127.0.0.1 and localhost, the admin's client certificate (group
// system:masters) and the key that signs ServiceAccount tokens. ECDSA P-256
// throughout: quick to make.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey string
	caPEM                                                     []byte
}

func ensurePKI(dir string) (*pki, error) {
	p := &pki{
		caCert:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		adminCert:  filepath.Join(dir, "admin.crt"),
		adminKey:   filepath.Join(dir, "admin.key"),
		saKey:      filepath.Join(dir, "sa.key"),
	}
	if _, err := os.Stat(p.saKey); err != nil {
		// The first start (sa.key is written last).
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := p.make(dir); err != nil {
			return nil, err
		}
	}
	var err error
	p.caPEM, err = os.ReadFile(p.caCert)
	return p, err
}

func (p *pki) make(dir string) error {
	caKey, err := newKey()
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kube-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writePEM(p.caCert, "CERTIFICATE", caDER); err != nil {
		return err
	}
	server := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := issue(ca, caKey, server, p.serverCert, p.serverKey); err != nil {
		return err
	}
	admin := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: "kube-test-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := issue(ca, caKey, admin, p.adminCert, p.adminKey); err != nil {
		return err
	}
	saKey, err := newKey()
	if err != nil {
		return err
	}
	return writeKey(p.saKey, saKey)
}

// issue signs template with the CA into certFile, with a new key in keyFile.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, template *x509.Certificate, certFile, keyFile string) error {
	key, err := newKey()
	if err != nil {
		return err
	}
	template.NotBefore = ca.NotBefore
	template.NotAfter = ca.NotAfter
	template.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeKey(keyFile, key); err != nil {
		return err
	}
	return writePEM(certFile, "CERTIFICATE", der)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func writeKey(file string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(file, "EC PRIVATE KEY", der)
}

func writePEM(file, kind string, der []byte) error {
	return writeWhole(file, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// user is how a kubeconfig authenticates: a client certificate or a bearer token.
type user struct {
	certFile, keyFile, token string
}

// writeKubeconfig writes a kubeconfig of one cluster (server, CA inline),
// one user and one context, the current one.
func writeKubeconfig(file, server string, caPEM []byte, u user) error {
	config := clientcmdapi.NewConfig()
	config.Clusters["kube-test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	auth := &clientcmdapi.AuthInfo{Token: u.token}
	if u.certFile != "" {
		auth.ClientCertificate, auth.ClientKey = u.certFile, u.keyFile
	}
	if (u.certFile == "") == (u.token == "") {
		return errors.New("a kubeconfig's user has a certificate or a token")
	}
	config.AuthInfos["user"] = auth
	config.Contexts["kube-test"] = &clientcmdapi.Context{Cluster: "kube-test", AuthInfo: "user"}
	config.CurrentContext = "kube-test"
	out, err := clientcmd.Write(*config)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return writeWhole(file, out, 0o600)
}
