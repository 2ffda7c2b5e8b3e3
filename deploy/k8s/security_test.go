package k8s_test

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The checks in this file return their findings instead of failing the
// test, so that TestSecurityChecksCatchBrokenReferences can show that each
// one fails on a manifest broken on purpose.

// plaintextOverlays may run etcd without TLS (a laptop cluster without
// cert-manager); every other rendering must be secure.
var plaintextOverlays = []string{"overlays/dev"}

// Workloads, as r.podTemplates names them.
const (
	wEtcd      = "StatefulSet/etcd"
	wGravelerd = "Deployment/gravelerd"
	wCleaner   = "CronJob/graveler-cleaner"
)

// checkSecurity checks the NetworkPolicies, the cert-manager objects and
// the etcd TLS wiring of a rendering.
func checkSecurity(t *testing.T, r *rendered) []error {
	errs := checkNetworkPolicies(r)
	errs = append(errs, checkCertificates(r)...)
	return append(errs, checkEtcdTLS(t, r)...)
}

func selects(sel *metav1.LabelSelector, lbls map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(lbls))
}

// namespace is the namespace the rendering's objects go to ("" when the
// kustomization sets none: the one kubectl applies to).
func (r *rendered) namespace() string {
	for _, d := range r.deployments {
		return d.Namespace
	}
	return ""
}

// peer is a pod that may try to connect, in its namespace.
type peer struct {
	name   string
	labels map[string]string
	ns     string // "" is the installation's own namespace
}

func (r *rendered) peerOf(workload string) peer {
	return peer{name: workload, labels: r.podTemplates()[workload].Labels}
}

var (
	strangerHere  = peer{name: "another pod of the namespace", labels: map[string]string{"app.kubernetes.io/name": "something-else"}}
	prometheus    = peer{name: "a pod of namespace monitoring", labels: map[string]string{"app.kubernetes.io/name": "prometheus"}, ns: "monitoring"}
	strangerThere = peer{name: "a pod of another namespace", labels: map[string]string{"app.kubernetes.io/name": "gravelerd"}, ns: "elsewhere"}
)

func ingressPolicy(np *networkingv1.NetworkPolicy) bool {
	return len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
}

func protocolOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil || *p == "" {
		return corev1.ProtocolTCP
	}
	return *p
}

func portMatches(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		if protocolOf(p.Protocol) != protocolOf(&cp.Protocol) {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if p.Port.StrVal == cp.Name {
				return true
			}
		case p.Port.IntVal == cp.ContainerPort || p.EndPort != nil && p.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *p.EndPort:
			return true
		}
	}
	return false
}

// peerMatches applies a rule's from list the way the API defines it: a
// podSelector alone means pods of the policy's namespace, a
// namespaceSelector pods of the namespaces it selects.
func (r *rendered) peerMatches(from []networkingv1.NetworkPolicyPeer, src peer) bool {
	if len(from) == 0 {
		return true
	}
	ns := src.ns
	if ns == "" {
		ns = r.namespace()
		if ns == "" {
			ns = "graveler"
		}
	}
	nsLabels := map[string]string{"kubernetes.io/metadata.name": ns}
	for _, p := range from {
		if p.IPBlock != nil {
			continue
		}
		nsOK := src.ns == "" && p.NamespaceSelector == nil || p.NamespaceSelector != nil && selects(p.NamespaceSelector, nsLabels)
		podOK := p.PodSelector == nil || selects(p.PodSelector, src.labels)
		if nsOK && podOK {
			return true
		}
	}
	return false
}

// admits says whether src may open a connection to port of the pods of
// template dst: yes when no ingress policy selects them, else only when a
// rule of one that does allows it.
func (r *rendered) admits(dst *corev1.PodTemplateSpec, port corev1.ContainerPort, src peer) bool {
	selected := false
	for _, np := range r.netpols {
		if !ingressPolicy(np) || !selects(&np.Spec.PodSelector, dst.Labels) {
			continue
		}
		selected = true
		for _, rule := range np.Spec.Ingress {
			if portMatches(rule.Ports, port) && r.peerMatches(rule.From, src) {
				return true
			}
		}
	}
	return !selected
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// checkNetworkPolicies checks that every selector and port of the policies
// refers to rendered pods and their ports, and that the policies admit
// exactly the connections the installation needs.
func checkNetworkPolicies(r *rendered) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	pods := r.podTemplates()
	for _, name := range sortedKeys(r.netpols) {
		np := r.netpols[name]
		var selected []string
		for _, w := range sortedKeys(pods) {
			if selects(&np.Spec.PodSelector, pods[w].Labels) {
				selected = append(selected, w)
			}
		}
		if len(selected) == 0 {
			bad("NetworkPolicy %s: podSelector %v selects no pod of the rendering", name, metav1.FormatLabelSelector(&np.Spec.PodSelector))
			continue
		}
		for i, rule := range np.Spec.Ingress {
			for _, p := range rule.From {
				if p.NamespaceSelector != nil || p.PodSelector == nil || len(p.PodSelector.MatchLabels)+len(p.PodSelector.MatchExpressions) == 0 {
					continue
				}
				if !slices.ContainsFunc(sortedKeys(pods), func(w string) bool { return selects(p.PodSelector, pods[w].Labels) }) {
					bad("NetworkPolicy %s ingress[%d]: from podSelector %v selects no pod of the rendering", name, i, metav1.FormatLabelSelector(p.PodSelector))
				}
			}
			for _, p := range rule.Ports {
				if p.Port == nil {
					continue
				}
				found := 0
				for _, w := range selected {
					if slices.ContainsFunc(pods[w].Spec.Containers, func(c corev1.Container) bool {
						return slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
							return portMatches([]networkingv1.NetworkPolicyPort{p}, cp)
						})
					}) {
						found++
					}
				}
				// A named port must exist in every pod selected (a pod
				// without it is simply not reachable that way, which hides
				// a typo); a number in at least one.
				if p.Port.Type == intstr.String && found != len(selected) || found == 0 {
					bad("NetworkPolicy %s ingress[%d]: port %s/%s is not a container port of %v", name, i, protocolOf(p.Protocol), p.Port.String(), selected)
				}
			}
		}
	}

	// Default deny: nothing is open to everyone.
	for _, w := range sortedKeys(pods) {
		if !slices.ContainsFunc(sortedKeys(r.netpols), func(n string) bool {
			return ingressPolicy(r.netpols[n]) && selects(&r.netpols[n].Spec.PodSelector, pods[w].Labels)
		}) {
			bad("%s: no ingress NetworkPolicy selects its pods (labels %v), so every pod of the cluster may connect to them", w, pods[w].Labels)
		}
	}

	// The connections the installation needs, and the others.
	port := func(w, name string) (*corev1.PodTemplateSpec, corev1.ContainerPort, bool) {
		tmpl := pods[w]
		if tmpl == nil || len(tmpl.Spec.Containers) == 0 {
			return nil, corev1.ContainerPort{}, false
		}
		for _, cp := range tmpl.Spec.Containers[0].Ports {
			if cp.Name == name {
				return tmpl, cp, true
			}
		}
		return nil, corev1.ContainerPort{}, false
	}
	gravelerd, cleaner, etcd := r.peerOf(wGravelerd), r.peerOf(wCleaner), r.peerOf(wEtcd)
	for _, want := range []struct {
		workload, port string
		admit, refuse  []peer
	}{
		{wEtcd, "client", []peer{gravelerd, cleaner}, []peer{strangerHere, prometheus, strangerThere}},
		{wEtcd, "peer", []peer{etcd}, []peer{gravelerd, cleaner, strangerHere, prometheus, strangerThere}},
		{wEtcd, "metrics", []peer{prometheus}, []peer{strangerHere, strangerThere}},
		{wGravelerd, "grpc", []peer{strangerHere}, []peer{strangerThere}},
		{wGravelerd, "metrics", []peer{prometheus}, []peer{strangerHere, strangerThere}},
	} {
		dst, cp, ok := port(want.workload, want.port)
		if !ok {
			bad("%s has no container port %s", want.workload, want.port)
			continue
		}
		for _, src := range want.admit {
			if !r.admits(dst, cp, src) {
				bad("NetworkPolicies refuse %s (labels %v) on %s port %s; it must be admitted", src.name, src.labels, want.workload, want.port)
			}
		}
		for _, src := range want.refuse {
			if r.admits(dst, cp, src) {
				bad("NetworkPolicies admit %s (labels %v) on %s port %s; it must be refused", src.name, src.labels, want.workload, want.port)
			}
		}
	}
	// No port of any pod is open to another namespace, except metrics to
	// monitoring (checked above).
	for _, w := range sortedKeys(pods) {
		for _, c := range pods[w].Spec.Containers {
			for _, cp := range c.Ports {
				if r.admits(pods[w], cp, strangerThere) {
					bad("NetworkPolicies admit %s on %s port %s", strangerThere.name, w, cp.Name)
				}
			}
		}
	}
	return errs
}

// issuerOf returns the issuer a Certificate names, and its key in r.issuers.
func (r *rendered) issuerOf(c *certificate) (*issuer, string) {
	kind := c.Spec.IssuerRef.Kind
	if kind == "" {
		kind = "Issuer"
	}
	key := kind + "/" + c.Spec.IssuerRef.Name
	return r.issuers[key], key
}

// certificateBySecret returns the Certificate whose Secret is name.
func (r *rendered) certificateBySecret(name string) *certificate {
	for _, n := range sortedKeys(r.certificates) {
		if c := r.certificates[n]; c.Spec.SecretName == name {
			return c
		}
	}
	return nil
}

var certUsages = []string{"server auth", "client auth", "digital signature", "key encipherment", "cert sign", "crl sign"}

// checkCertificates checks the cert-manager objects on their own: every
// Certificate names a rendered issuer and a Secret of its own, every CA
// issuer's Secret is a CA Certificate's, and a self-signed issuer signs
// only CAs (a self-signed leaf chains to nothing the others trust).
func checkCertificates(r *rendered) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	secrets := map[string]string{}
	for _, n := range sortedKeys(r.certificates) {
		c := r.certificates[n]
		if c.Spec.SecretName == "" {
			bad("Certificate %s has no secretName", n)
		} else if other, ok := secrets[c.Spec.SecretName]; ok {
			bad("Certificates %s and %s write the same Secret %s", other, n, c.Spec.SecretName)
		}
		secrets[c.Spec.SecretName] = n
		if g := c.Spec.IssuerRef.Group; g != "" && g != "cert-manager.io" {
			bad("Certificate %s: issuerRef group %q is not cert-manager.io", n, g)
		}
		iss, key := r.issuerOf(c)
		if iss == nil {
			bad("Certificate %s: issuerRef names %s, which the rendering does not define", n, key)
		} else if iss.Spec.SelfSigned != nil && !c.Spec.IsCA {
			bad("Certificate %s is not a CA but is issued by the self-signed %s: it chains to no CA the others trust", n, key)
		} else if iss.Spec.CA != nil && iss.Spec.CA.SecretName == c.Spec.SecretName {
			bad("Certificate %s is issued by %s, which signs with that very Certificate's Secret", n, key)
		}
		if !c.Spec.IsCA && len(c.Spec.Usages) == 0 {
			bad("Certificate %s lists no usages (server auth / client auth)", n)
		}
		for _, u := range c.Spec.Usages {
			if !slices.Contains(certUsages, u) {
				bad("Certificate %s: usage %q is not one of %v", n, u, certUsages)
			}
		}
		for _, ip := range c.Spec.IPAddresses {
			if net.ParseIP(ip) == nil {
				bad("Certificate %s: ipAddress %q is not an IP", n, ip)
			}
		}
	}
	for _, key := range sortedKeys(r.issuers) {
		iss := r.issuers[key]
		switch {
		case (iss.Spec.SelfSigned != nil) == (iss.Spec.CA != nil):
			bad("%s must be exactly one of selfSigned and ca", key)
		case iss.Spec.CA != nil:
			ca := r.certificateBySecret(iss.Spec.CA.SecretName)
			if ca == nil || !ca.Spec.IsCA {
				bad("%s signs with Secret %q, which no CA Certificate (isCA: true) of the rendering writes", key, iss.Spec.CA.SecretName)
			}
		}
	}
	return errs
}

// certFile is a TLS file a container reads: the Certificate whose Secret
// is mounted there, and the key of that Secret.
type certFile struct {
	cert *certificate
	key  string
}

// tlsFile resolves path in container c of pod spec to a Certificate's
// Secret key; what names the setting in errors.
func (r *rendered) tlsFile(spec *corev1.PodSpec, c corev1.Container, what, p string) (certFile, error) {
	v, m := volumeFor(spec, c, p)
	if v == nil || v.Secret == nil {
		return certFile{}, fmt.Errorf("%s %s is not on a Secret volume", what, p)
	}
	cert := r.certificateBySecret(v.Secret.SecretName)
	if cert == nil {
		return certFile{}, fmt.Errorf("%s %s is on Secret %s, which no Certificate of the rendering writes", what, p, v.Secret.SecretName)
	}
	if len(v.Secret.Items) > 0 {
		return certFile{}, fmt.Errorf("%s: the volume of Secret %s remaps its keys (items), which the check does not follow", what, v.Secret.SecretName)
	}
	key := strings.TrimPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
	return certFile{cert: cert, key: key}, nil
}

// covers says whether a certificate is valid for host (a DNS name, with
// one-label wildcards, or an IP address).
func covers(c *certificate, host string) bool {
	if net.ParseIP(host) != nil {
		return slices.ContainsFunc(c.Spec.IPAddresses, func(ip string) bool { return net.ParseIP(ip).Equal(net.ParseIP(host)) })
	}
	for _, n := range c.Spec.DNSNames {
		if n == host {
			return true
		}
		if rest, ok := strings.CutPrefix(n, "*."); ok {
			if _, after, ok := strings.Cut(host, "."); ok && after == rest {
				return true
			}
		}
	}
	return false
}

func argValues(args []string) map[string]string {
	values := map[string]string{}
	for _, a := range args {
		if name, ok := flagName(a); ok {
			_, v, _ := strings.Cut(a, "=")
			values[name] = v
		}
	}
	return values
}

func urlsOf(list string) []*url.URL {
	var out []*url.URL
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, v, ok := strings.Cut(s, "="); ok && !strings.Contains(s[:strings.Index(s, "=")], "/") {
			s = v // name=URL of --initial-cluster
		}
		if u, err := url.Parse(s); err == nil {
			out = append(out, u)
		} else {
			out = append(out, &url.URL{Scheme: "invalid", Host: s})
		}
	}
	return out
}

// etcdClient is what one client of etcd is configured with.
type etcdClient struct {
	workload            string
	spec                *corev1.PodSpec
	container           corev1.Container
	endpoints, ca, cert string
	key                 string
}

// etcdClients reads gravelerd's and the cleaner's etcd settings: a flag
// wins over its GRAVELER_* variable, as in both binaries.
func (r *rendered) etcdClients(t *testing.T) []etcdClient {
	var out []etcdClient
	for _, w := range []string{wGravelerd, wCleaner} {
		tmpl := r.podTemplates()[w]
		if tmpl == nil || len(tmpl.Spec.Containers) == 0 {
			continue
		}
		c := tmpl.Spec.Containers[0]
		env := r.containerEnv(t, path.Base(w), c)
		values := argValues(expandArgs(t, w, c.Args, env))
		get := func(flag string) string {
			if v, ok := values[flag]; ok {
				return v
			}
			return env["GRAVELER_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))]
		}
		out = append(out, etcdClient{workload: w, spec: &tmpl.Spec, container: c,
			endpoints: get("etcd-endpoints"), ca: get("etcd-ca"), cert: get("etcd-cert"), key: get("etcd-key")})
	}
	return out
}

// checkEtcdTLS checks that etcd serves clients and peers over TLS and
// requires their certificates, that every certificate involved is one of
// the rendering's Certificates and valid for the names it is reached by,
// and that gravelerd and the cleaner present certificates etcd trusts and
// trust etcd's. Only plaintextOverlays may do without, and then without
// any cert-manager object.
func checkEtcdTLS(t *testing.T, r *rendered) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	ss, ok := r.statefulSets["etcd"]
	if !ok || len(ss.Spec.Template.Spec.Containers) == 0 {
		return []error{fmt.Errorf("no etcd StatefulSet")}
	}
	spec := &ss.Spec.Template.Spec
	c := spec.Containers[0]
	clients := r.etcdClients(t)

	if slices.Contains(plaintextOverlays, r.dir) {
		if len(r.certificates)+len(r.issuers) > 0 {
			bad("%s runs etcd without TLS, so it must not need cert-manager: it renders %d Certificates and %d issuers", r.dir, len(r.certificates), len(r.issuers))
		}
		values := argValues(c.Args)
		for _, f := range []string{"cert-file", "key-file", "trusted-ca-file", "client-cert-auth", "peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "peer-client-cert-auth"} {
			if _, ok := values[f]; ok {
				bad("plaintext etcd still has --%s", f)
			}
		}
		for _, cl := range clients {
			if cl.ca != "" || cl.cert != "" || cl.key != "" || strings.Contains(cl.endpoints, "https://") {
				bad("%s: etcd is plaintext here, but the client has CA %q, certificate %q, key %q, endpoints %q", cl.workload, cl.ca, cl.cert, cl.key, cl.endpoints)
			}
		}
		return errs
	}

	replicas := 1
	if ss.Spec.Replicas != nil {
		replicas = int(*ss.Spec.Replicas)
	}
	var server, peerCert, trusted, peerTrusted certFile
	for i := range replicas {
		pod := fmt.Sprintf("%s-%d", ss.Name, i)
		values := argValues(expandArgs(t, pod, c.Args, r.containerEnv(t, pod, c)))
		for _, f := range []string{"client-cert-auth", "peer-client-cert-auth"} {
			if values[f] != "true" {
				bad("etcd %s: --%s=true is required (secure by default: only certificate holders may connect), got %q", pod, f, values[f])
			}
		}
		for _, f := range []string{"listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls", "initial-cluster"} {
			us := urlsOf(values[f])
			if len(us) == 0 || slices.ContainsFunc(us, func(u *url.URL) bool { return u.Scheme != "https" }) {
				bad("etcd %s: --%s=%q must list only https URLs", pod, f, values[f])
			}
		}
		files := map[string]*certFile{"cert-file": &server, "key-file": nil, "trusted-ca-file": &trusted,
			"peer-cert-file": &peerCert, "peer-key-file": nil, "peer-trusted-ca-file": &peerTrusted}
		wantKey := map[string]string{"cert-file": "tls.crt", "key-file": "tls.key", "trusted-ca-file": "ca.crt",
			"peer-cert-file": "tls.crt", "peer-key-file": "tls.key", "peer-trusted-ca-file": "ca.crt"}
		for _, f := range sortedKeys(files) {
			if values[f] == "" {
				bad("etcd %s: --%s is not set", pod, f)
				continue
			}
			cf, err := r.tlsFile(spec, c, "etcd --"+f, values[f])
			if err != nil {
				bad("%v", err)
				continue
			}
			if cf.key != wantKey[f] {
				bad("etcd --%s=%s reads key %q of Secret %s; cert-manager writes it as %q", f, values[f], cf.key, cf.cert.Spec.SecretName, wantKey[f])
			}
			if files[f] != nil {
				*files[f] = cf
			}
		}
		for _, pair := range [][2]string{{"cert-file", "key-file"}, {"peer-cert-file", "peer-key-file"}} {
			if a, b := values[pair[0]], values[pair[1]]; path.Dir(a) != path.Dir(b) {
				bad("etcd --%s and --%s are in different directories (%s, %s): not one key pair", pair[0], pair[1], a, b)
			}
		}
		if server.cert != nil {
			for _, u := range urlsOf(values["advertise-client-urls"]) {
				if !covers(server.cert, u.Hostname()) {
					bad("etcd %s advertises client URL %s, which Certificate %s (dnsNames %v) does not cover", pod, u, server.cert.Name, server.cert.Spec.DNSNames)
				}
			}
			if !slices.Contains(server.cert.Spec.Usages, "server auth") {
				bad("Certificate %s serves etcd's clients without usage \"server auth\"", server.cert.Name)
			}
		}
		if peerCert.cert != nil {
			for _, f := range []string{"initial-advertise-peer-urls", "initial-cluster"} {
				for _, u := range urlsOf(values[f]) {
					if !covers(peerCert.cert, u.Hostname()) {
						bad("etcd --%s names %s, which the peer Certificate %s (dnsNames %v) does not cover", f, u, peerCert.cert.Name, peerCert.cert.Spec.DNSNames)
					}
				}
			}
			for _, u := range []string{"server auth", "client auth"} {
				if !slices.Contains(peerCert.cert.Spec.Usages, u) {
					bad("peer Certificate %s lacks usage %q: each member is server and client of the others", peerCert.cert.Name, u)
				}
			}
		}
	}
	if server.cert == nil || trusted.cert == nil || peerCert.cert == nil || peerTrusted.cert == nil {
		return errs
	}
	// Every Secret written by one CA issuer carries that CA as ca.crt: two
	// certificates trust each other when their issuers are the same.
	serverIssuer, _ := r.issuerOf(server.cert)
	trustedIssuer, _ := r.issuerOf(trusted.cert)
	peerIssuer, _ := r.issuerOf(peerCert.cert)
	peerTrustedIssuer, _ := r.issuerOf(peerTrusted.cert)
	if peerIssuer == nil || peerIssuer != peerTrustedIssuer {
		bad("etcd's peer certificate %s and its --peer-trusted-ca-file (from %s) are not of one issuer: members would refuse each other", peerCert.cert.Name, peerTrusted.cert.Name)
	}
	for _, cl := range clients {
		if cl.ca == "" || cl.cert == "" || cl.key == "" {
			bad("%s: etcd requires a client certificate, but the client has CA %q, certificate %q, key %q", cl.workload, cl.ca, cl.cert, cl.key)
			continue
		}
		for _, u := range urlsOf(cl.endpoints) {
			if u.Scheme != "https" {
				bad("%s: etcd endpoint %s is not https", cl.workload, u)
			} else if !covers(server.cert, u.Hostname()) {
				bad("%s: etcd endpoint %s is not a name of etcd's Certificate %s (dnsNames %v)", cl.workload, u, server.cert.Name, server.cert.Spec.DNSNames)
			}
		}
		files := map[string]certFile{}
		for what, p := range map[string]string{"ca.crt": cl.ca, "tls.crt": cl.cert, "tls.key": cl.key} {
			cf, err := r.tlsFile(cl.spec, cl.container, cl.workload+" etcd "+what, p)
			if err != nil {
				bad("%v", err)
				continue
			}
			if cf.key != what {
				bad("%s: its etcd %s is key %q of Secret %s", cl.workload, what, cf.key, cf.cert.Spec.SecretName)
			}
			files[what] = cf
		}
		crt, ok1 := files["tls.crt"]
		ca, ok2 := files["ca.crt"]
		if !ok1 || !ok2 {
			continue
		}
		if key, ok := files["tls.key"]; ok && key.cert != crt.cert {
			bad("%s: etcd certificate and key come from different Secrets (%s, %s)", cl.workload, crt.cert.Spec.SecretName, key.cert.Spec.SecretName)
		}
		if !slices.Contains(crt.cert.Spec.Usages, "client auth") {
			bad("%s: its etcd certificate %s lacks usage \"client auth\"", cl.workload, crt.cert.Name)
		}
		if iss, _ := r.issuerOf(crt.cert); iss == nil || iss != trustedIssuer {
			bad("%s: its etcd certificate %s is not issued by the issuer of etcd's --trusted-ca-file (from %s): etcd would refuse it", cl.workload, crt.cert.Name, trusted.cert.Name)
		}
		if iss, _ := r.issuerOf(ca.cert); iss == nil || iss != serverIssuer {
			bad("%s: its etcd CA (from %s) is not the issuer of etcd's certificate %s: it would refuse etcd", cl.workload, ca.cert.Name, server.cert.Name)
		}
	}
	return errs
}

// TestSecurityChecksCatchBrokenReferences breaks the base's security
// wiring one way at a time: each break must be reported.
func TestSecurityChecksCatchBrokenReferences(t *testing.T) {
	if errs := checkSecurity(t, render(t, "base")); len(errs) > 0 {
		t.Fatalf("base as it is: %v", errs)
	}
	for _, tc := range []struct {
		name    string
		breakIt func(r *rendered)
		want    string
	}{
		{"a from podSelector matches no pod", func(r *rendered) {
			r.netpols["etcd"].Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] = "graveler-d"
		}, "selects no pod"},
		{"a rule's port is no container port", func(r *rendered) {
			p := intstr.FromString("peers")
			r.netpols["etcd"].Spec.Ingress[1].Ports[0].Port = &p
		}, "is not a container port"},
		{"a policy's podSelector matches no pod", func(r *rendered) {
			r.netpols["gravelerd"].Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] = "graveler"
		}, "NetworkPolicy gravelerd: podSelector"},
		{"no default deny", func(r *rendered) { delete(r.netpols, "graveler-default-deny") }, "CronJob/graveler-cleaner: no ingress NetworkPolicy"},
		{"etcd's client port open to the namespace", func(r *rendered) {
			r.netpols["etcd"].Spec.Ingress[0].From = nil
		}, "admit another pod of the namespace (labels map[app.kubernetes.io/name:something-else]) on StatefulSet/etcd port client"},
		{"an issuerRef names no Issuer", func(r *rendered) {
			r.certificates["etcd-server"].Spec.IssuerRef.Name = "graveler-etcd"
		}, "names Issuer/graveler-etcd, which the rendering does not define"},
		{"the server certificate misses a member", func(r *rendered) {
			c := r.certificates["etcd-server"]
			c.Spec.DNSNames = slices.DeleteFunc(c.Spec.DNSNames, func(n string) bool { return n == "etcd-1.etcd" })
		}, "etcd-1 advertises client URL https://etcd-1.etcd:2379, which Certificate etcd-server"},
		{"the peer certificate misses a member", func(r *rendered) {
			c := r.certificates["etcd-peer"]
			c.Spec.DNSNames = slices.DeleteFunc(c.Spec.DNSNames, func(n string) bool { return n == "etcd-2.etcd" })
		}, "which the peer Certificate etcd-peer"},
		{"a pod mounts a Secret no Certificate writes", func(r *rendered) {
			for i, v := range r.deployments["gravelerd"].Spec.Template.Spec.Volumes {
				if v.Secret != nil && v.Secret.SecretName == "gravelerd-etcd-client-tls" {
					r.deployments["gravelerd"].Spec.Template.Spec.Volumes[i].Secret.SecretName = "gravelerd-etcd-client"
				}
			}
		}, "on Secret gravelerd-etcd-client, which no Certificate of the rendering writes"},
		{"the CA issuer's Secret is no CA", func(r *rendered) { r.certificates["graveler-etcd-ca"].Spec.IsCA = false }, "which no CA Certificate"},
		{"a client certificate from another CA", func(r *rendered) {
			r.certificates["graveler-cleaner-etcd-client"].Spec.IssuerRef.Name = "graveler-selfsigned"
		}, "CronJob/graveler-cleaner: its etcd certificate graveler-cleaner-etcd-client is not issued by the issuer"},
		{"etcd without client certificates", func(r *rendered) {
			c := &r.statefulSets["etcd"].Spec.Template.Spec.Containers[0]
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--client-cert-auth=true" })
		}, "--client-cert-auth=true is required"},
		{"etcd's peers over plain HTTP", func(r *rendered) {
			c := &r.statefulSets["etcd"].Spec.Template.Spec.Containers[0]
			for i, a := range c.Args {
				c.Args[i] = strings.Replace(a, "--listen-peer-urls=https", "--listen-peer-urls=http", 1)
			}
		}, "--listen-peer-urls=\"http://0.0.0.0:2380\" must list only https URLs"},
		{"a client without its certificate", func(r *rendered) {
			c := &r.deployments["gravelerd"].Spec.Template.Spec.Containers[0]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GRAVELER_ETCD_CERT" })
		}, "Deployment/gravelerd: etcd requires a client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, "base")
			tc.breakIt(r)
			errs := checkSecurity(t, r)
			if !slices.ContainsFunc(errs, func(err error) bool { return strings.Contains(err.Error(), tc.want) }) {
				t.Errorf("no finding says %q; findings: %v", tc.want, errs)
			}
		})
	}
}
