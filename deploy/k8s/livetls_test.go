package k8s_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

// The live tests run the binaries against an etcd started with the
// rendered etcd's own flags. Where the manifests mount a Certificate's
// Secret, these helpers issue what cert-manager would from the
// Certificate's spec, and move the paths to a temporary directory.

// issued is one issued Certificate.
type issued struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	ca   *x509.Certificate // the issuer's certificate: the Secret's ca.crt
}

var extKeyUsages = map[string]x509.ExtKeyUsage{"server auth": x509.ExtKeyUsageServerAuth, "client auth": x509.ExtKeyUsageClientAuth}

// issueCertificates issues every Certificate of r as its issuer would
// (self-signed, or signed by the CA whose Secret a CA Issuer names) and
// writes each Secret's tls.crt, tls.key and ca.crt under dir/<secretName>/.
func issueCertificates(t *testing.T, r *rendered, dir string) {
	t.Helper()
	done := map[string]*issued{} // by secretName
	for len(done) < len(r.certificates) {
		progress := false
		for _, name := range sortedKeys(r.certificates) {
			c := r.certificates[name]
			if done[c.Spec.SecretName] != nil {
				continue
			}
			iss, key := r.issuerOf(c)
			if iss == nil {
				t.Fatalf("Certificate %s: no %s", name, key)
			}
			var parent *issued
			if iss.Spec.CA != nil {
				if parent = done[iss.Spec.CA.SecretName]; parent == nil {
					continue // its CA is not issued yet
				}
			}
			done[c.Spec.SecretName] = issue(t, c, parent)
			progress = true
		}
		if !progress {
			t.Fatalf("Certificates that no chain of issuers reaches: %v", r.certificates)
		}
	}
	for secret, is := range done {
		d := filepath.Join(dir, secret)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(is.key)
		if err != nil {
			t.Fatal(err)
		}
		for file, block := range map[string]*pem.Block{
			"tls.crt": {Type: "CERTIFICATE", Bytes: is.cert.Raw},
			"tls.key": {Type: "PRIVATE KEY", Bytes: keyDER},
			"ca.crt":  {Type: "CERTIFICATE", Bytes: is.ca.Raw},
		} {
			if err := os.WriteFile(filepath.Join(d, file), pem.EncodeToMemory(block), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func issue(t *testing.T, c *certificate, parent *issued) *issued {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: c.Spec.CommonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     c.Spec.DNSNames,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	for _, ip := range c.Spec.IPAddresses {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range c.Spec.Usages {
		if eku, ok := extKeyUsages[u]; ok {
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, eku)
		}
	}
	if c.Spec.IsCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	is := &issued{cert: cert, key: key, ca: cert}
	if parent != nil {
		is.ca = parent.cert
	}
	return is
}

// secretPath moves p, a file the container reads from a Secret volume, to
// the same key under secretsDir/<secretName>.
func secretPath(t *testing.T, spec *corev1.PodSpec, c corev1.Container, p, secretsDir string) string {
	t.Helper()
	v, m := volumeFor(spec, c, p)
	if v == nil || v.Secret == nil {
		t.Fatalf("container %s: %s is not on a Secret volume", c.Name, p)
	}
	rel, err := filepath.Rel(m.MountPath, p)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(secretsDir, v.Secret.SecretName, rel)
}

// startRenderedEtcd starts an embedded etcd with the arguments of the
// rendered etcd-0, its certificates issued into secretsDir; only its URLs
// are moved to loopback ports and its data to a temporary directory. It
// returns the client URL.
func startRenderedEtcd(t *testing.T, r *rendered, secretsDir string) string {
	t.Helper()
	ss := r.statefulSets["etcd"]
	spec := &ss.Spec.Template.Spec
	c := spec.Containers[0]
	pod := ss.Name + "-0"
	cfg, fs, _, err := parseEtcdArgs(expandArgs(t, "etcd", c.Args, r.containerEnv(t, pod, c)))
	if err != nil {
		t.Fatal(err)
	}
	scheme := func(flag string) string {
		u := urlsOf(fs.Lookup(flag).Value.String())
		if len(u) == 0 {
			t.Fatalf("etcd --%s is not set", flag)
		}
		return u[0].Scheme
	}
	cu := url.URL{Scheme: scheme("listen-client-urls"), Host: freeAddr(t)}
	pu := url.URL{Scheme: scheme("listen-peer-urls"), Host: freeAddr(t)}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.ListenMetricsUrls = nil
	cfg.Dir = filepath.Join(t.TempDir(), "etcd")
	cfg.TickMs, cfg.ElectionMs, cfg.UnsafeNoFsync = 10, 100, true
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	for _, f := range []*string{&cfg.ClientTLSInfo.CertFile, &cfg.ClientTLSInfo.KeyFile, &cfg.ClientTLSInfo.TrustedCAFile,
		&cfg.PeerTLSInfo.CertFile, &cfg.PeerTLSInfo.KeyFile, &cfg.PeerTLSInfo.TrustedCAFile} {
		if *f != "" {
			*f = secretPath(t, spec, c, *f, secretsDir)
		}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("etcd with the rendered arguments: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd with the rendered arguments: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd with the rendered arguments did not become ready")
	}
	return cu.String()
}

// moveEtcdClientFiles points a client's GRAVELER_ETCD_CA/CERT/KEY at the
// issued files, and returns them (empty when the client has none).
func moveEtcdClientFiles(t *testing.T, spec *corev1.PodSpec, c corev1.Container, env map[string]string, secretsDir string) (ca, cert, key string) {
	t.Helper()
	for _, k := range []string{"GRAVELER_ETCD_CA", "GRAVELER_ETCD_CERT", "GRAVELER_ETCD_KEY"} {
		if env[k] != "" {
			env[k] = secretPath(t, spec, c, env[k], secretsDir)
		}
	}
	return env["GRAVELER_ETCD_CA"], env["GRAVELER_ETCD_CERT"], env["GRAVELER_ETCD_KEY"]
}

// checkRefusesUncertified: an etcd client that trusts the server but has
// no certificate of its own gets no answer.
func checkRefusesUncertified(t *testing.T, endpoint, caFile string) {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("CA %s: %v", caFile, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second,
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, Logger: zap.NewNop()})
	if err != nil {
		return // refused while dialling
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "/"); err == nil {
		t.Errorf("etcd answered a client without a certificate: neither --client-cert-auth nor --trusted-ca-file is in force")
	}
}
