package k8s_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	gravelerv1 "graveler/api/graveler/v1"
	"graveler/server"
)

const (
	repoRoot  = "../.."
	imageRepo = "graveler/" // manifests name images graveler/<Dockerfile target>
)

var (
	binDir    string           // the binaries the Dockerfile builds
	buildOnce sync.Once        // builds them all, on first use
	buildErrs map[string]error // by binary name
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		dir, err := os.MkdirTemp("", "graveler-k8s-bins-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

// goTool finds the go command of the toolchain running the test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// buildBinaries builds the packages the Dockerfile builds, so the flags
// checked are those of the shipped binaries. A package that fails to build
// fails only the checks that need it.
func buildBinaries(dir string) map[string]error {
	errs := map[string]error{}
	df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		errs[""] = err
		return errs
	}
	for _, pkg := range df.packages {
		args := []string{"build", "-o", filepath.Join(dir, path.Base(pkg)), pkg}
		cmd := exec.Command(goTool(), args...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			errs[path.Base(pkg)] = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return errs
}

func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() { buildErrs = buildBinaries(binDir) })
	if err := buildErrs[""]; err != nil {
		t.Fatal(err)
	}
	if err := buildErrs[name]; err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
	return filepath.Join(binDir, name)
}

// helpRun runs bin with args and exactly the environment env (plus PATH
// and HOME), and returns its combined output and exit code.
func helpRun(t *testing.T, bin string, env map[string]string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return string(out), 0
}

var helpFlagRE = regexp.MustCompile(`(?m)^\s+(?:-[A-Za-z], )?--?([A-Za-z0-9][A-Za-z0-9-]*)`)

// helpFlags runs `bin --help` with an empty environment and returns the
// flags it lists.
func helpFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, code := helpRun(t, bin, nil, "--help")
	if code != 0 {
		t.Fatalf("%s --help: exit %d\n%s", bin, code, out)
	}
	flags := map[string]bool{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(out, -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("%s --help lists only %v:\n%s", bin, flags, out)
	}
	return flags
}

// envFlag is gravelerd's convention: --etcd-endpoints is GRAVELER_ETCD_ENDPOINTS.
func envFlag(env string) (string, bool) {
	s, ok := strings.CutPrefix(env, "GRAVELER_")
	if !ok {
		return "", false
	}
	return strings.ToLower(strings.ReplaceAll(s, "_", "-")), true
}

// dockerfile is what the test reads from the Dockerfile.
type dockerfile struct {
	packages []string           // ./cmd/... packages built
	stages   map[string]*dStage // final stages by name
}

type dStage struct {
	name, base, user, copied, entrypoint string
	env                                  map[string]string // ENV
	expose                               []string          // EXPOSE ports
}

func parseDockerfile(file string) (*dockerfile, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	df := &dockerfile{stages: map[string]*dStage{}}
	var cur *dStage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch strings.ToUpper(f[0]) {
		case "FROM":
			cur = nil
			if len(f) == 4 && strings.EqualFold(f[2], "AS") {
				cur = &dStage{name: f[3], base: f[1], env: map[string]string{}}
				df.stages[f[3]] = cur
			}
		case "RUN":
			if slices.Contains(f, "build") {
				for _, w := range f {
					if strings.HasPrefix(w, "./cmd/") {
						df.packages = append(df.packages, w)
					}
				}
			}
		case "USER":
			if cur != nil {
				cur.user = f[1]
			}
		case "COPY":
			if cur != nil && len(f) >= 3 && strings.HasPrefix(f[1], "--from=") {
				cur.copied = f[2]
			}
		case "ENV":
			if cur == nil || len(f) < 2 {
				break
			}
			if !strings.Contains(f[1], "=") { // legacy form: ENV KEY value
				cur.env[f[1]] = strings.Join(f[2:], " ")
				break
			}
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				cur.env[k] = strings.Trim(v, `"`)
			}
		case "EXPOSE":
			if cur != nil {
				for _, p := range f[1:] {
					p, _, _ = strings.Cut(p, "/")
					cur.expose = append(cur.expose, p)
				}
			}
		case "ENTRYPOINT":
			if cur != nil {
				cur.entrypoint = strings.Trim(strings.Join(f[1:], " "), `[]" `)
			}
		}
	}
	if len(df.packages) == 0 {
		return nil, fmt.Errorf("%s: no RUN go build ./cmd/... line", file)
	}
	return df, nil
}

// TestDockerfile checks that every binary built exists as a cmd/ package
// and gets its own stage, which runs it as a numeric non-root user on a
// static base.
func TestDockerfile(t *testing.T) {
	df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"./cmd/gravelerd", "./cmd/cleaner", "./cmd/gravelerctl"} {
		if !slices.Contains(df.packages, want) {
			t.Errorf("Dockerfile does not build %s", want)
		}
	}
	for _, pkg := range df.packages {
		name := path.Base(pkg)
		if fi, err := os.Stat(filepath.Join(repoRoot, pkg, "main.go")); err != nil || fi.IsDir() {
			t.Errorf("Dockerfile builds %s, which has no main.go: %v", pkg, err)
		}
		st, ok := df.stages[name]
		if !ok {
			t.Errorf("Dockerfile builds %s but has no stage named %s", pkg, name)
			continue
		}
		if !strings.Contains(st.base, "distroless/static") && st.base != "scratch" {
			t.Errorf("stage %s is based on %s, want a static distroless or scratch base", name, st.base)
		}
		uid, _, _ := strings.Cut(st.user, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("stage %s runs as USER %q; want a numeric non-root uid (Kubernetes verifies runAsNonRoot only for numeric users)", name, st.user)
		}
		if path.Base(st.copied) != name || path.Base(st.entrypoint) != name {
			t.Errorf("stage %s copies %q and runs %q; want the %s binary", name, st.copied, st.entrypoint, name)
		}
	}
	if _, ok := df.stages["gravelerd"]; ok && len(df.stages["gravelerd"].expose) == 0 {
		t.Errorf("stage gravelerd exposes no port")
	}
	if b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile")); err != nil || !bytes.Contains(b, []byte("CGO_ENABLED=0")) {
		t.Errorf("Dockerfile must build with CGO_ENABLED=0 (static binaries for a static base): %v", err)
	}
}

// TestDockerfileEnv checks each image's settings against its binary: every
// GRAVELER_* variable a stage sets is one of the binary's flags and its
// value is accepted, and every port a stage exposes is one the binary
// listens on, on every interface, with those settings.
func TestDockerfileEnv(t *testing.T) {
	df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range df.packages {
		name := path.Base(pkg)
		st, ok := df.stages[name]
		if !ok || (len(st.env) == 0 && len(st.expose) == 0) {
			continue
		}
		bin := binary(t, name)
		flags := helpFlags(t, bin)
		grav := map[string]string{}
		for k, v := range st.env {
			flagName, ok := envFlag(k)
			if !ok {
				continue
			}
			grav[k] = v
			if !flags[flagName] {
				t.Errorf("Dockerfile stage %s sets %s, but `%s --help` has no --%s", name, k, name, flagName)
			}
		}
		if out, code := helpRun(t, bin, grav, "--help"); code != 0 {
			t.Errorf("%s rejects the environment of its Dockerfile stage (exit %d):\n%s", name, code, out)
		}
		listening := map[string]bool{}
		for k, v := range grav {
			if !strings.HasSuffix(k, "_LISTEN") && !strings.HasSuffix(k, "_ADDR") {
				continue
			}
			host, port, err := net.SplitHostPort(v)
			if err != nil {
				t.Errorf("Dockerfile stage %s: %s=%q is not host:port", name, k, v)
				continue
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				listening[port] = true
			}
		}
		for _, p := range st.expose {
			if !listening[p] {
				t.Errorf("Dockerfile stage %s exposes %s, but no GRAVELER_*_LISTEN/_ADDR of the stage makes %s listen on it on every interface (its defaults may be loopback or off)", name, p, name)
			}
		}
	}
}

// TestStrictDecodeRejectsUnknownFields shows that the validation fails on
// a misspelt field, which a lenient decoder would drop silently.
func TestStrictDecodeRejectsUnknownFields(t *testing.T) {
	for _, tc := range []struct{ name, js string }{
		{"unknown field", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replica":2}}`},
		{"wrong case", `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"Replicas":2}}`},
		{"unknown kind", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}`},
		{"misspelt cert-manager field", `{"apiVersion":"cert-manager.io/v1","kind":"Certificate","metadata":{"name":"x"},"spec":{"secretname":"s","issuerRef":{"name":"i"}}}`},
		{"cert-manager field no check knows", `{"apiVersion":"cert-manager.io/v1","kind":"Issuer","metadata":{"name":"x"},"spec":{"acme":{}}}`},
		{"old cert-manager version", `{"apiVersion":"cert-manager.io/v1alpha2","kind":"Certificate","metadata":{"name":"x"},"spec":{"secretName":"s","issuerRef":{"name":"i"}}}`},
	} {
		if _, err := decodeStrict([]byte(tc.js)); err == nil {
			t.Errorf("%s: decoded without error", tc.name)
		}
	}
	for _, js := range []string{
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replicas":2}}`,
		`{"apiVersion":"cert-manager.io/v1","kind":"Certificate","metadata":{"name":"x"},"spec":{"secretName":"s","issuerRef":{"name":"i"},"dnsNames":["a"]}}`,
	} {
		if _, err := decodeStrict([]byte(js)); err != nil {
			t.Errorf("valid object: %v", err)
		}
	}
	// And through kustomize, as the real manifests go.
	fs := filesys.MakeFsInMemory()
	for name, content := range map[string]string{
		"/good/kustomization.yaml": "resources: [cm.yaml]\n",
		"/good/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
		"/bad/kustomization.yaml":  "resources: [cm.yaml]\n",
		"/bad/cm.yaml":             "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndatta: {a: b}\n",
	} {
		if err := fs.WriteFile(name, []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if objs, err := renderObjects(fs, "/good"); err != nil || len(objs) != 1 {
		t.Errorf("valid kustomization: %d objects, %v", len(objs), err)
	}
	if _, err := renderObjects(fs, "/bad"); err == nil || !strings.Contains(err.Error(), "datta") {
		t.Errorf("a ConfigMap with a misspelt field: got %v, want an unknown field error", err)
	}
}

// TestManifests renders base/ and every overlay, with the local secret
// files an operator creates in place, and checks them.
func TestManifests(t *testing.T) {
	df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range kustomizations(t) {
		t.Run(dir, func(t *testing.T) {
			r := render(t, dir)
			checkPods(t, r, df)
			checkEtcd(t, r)
			checkGravelerd(t, r)
			checkCleaner(t, r)
			for _, err := range checkSecurity(t, r) {
				t.Errorf("%s: %v", dir, err)
			}
			for _, err := range checkNoPlaceholders(r) {
				t.Errorf("%s: %v", dir, err)
			}
		})
	}
}

// TestLocalSecretFiles: the s3 overlay generates its Secrets from files
// git ignores, so the repository holds no credential and no placeholder
// that could be applied as it is. Without a file, kustomize stops before
// anything is applied and names it. Each file has an example beside it,
// and the tokens example copied unedited is refused by gravelerd.
func TestLocalSecretFiles(t *testing.T) {
	examples, err := filepath.Glob("overlays/*/secrets/*.example")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no overlays/*/secrets/*.example: %v", err)
	}
	for _, e := range examples {
		if _, ok := localSecretFiles[strings.TrimSuffix(e, ".example")]; !ok {
			t.Errorf("%s has no entry in localSecretFiles: the tests render without that file", e)
		}
	}
	for _, name := range sortedKeys(localSecretFiles) {
		dir, file := filepath.Split(name)
		ignore := filepath.Join(dir, ".gitignore")
		if !gitignores(t, ignore, file) {
			t.Errorf("%s does not make git ignore %s: real credentials could be committed", ignore, file)
		}
		example := name + ".example"
		if gitignores(t, ignore, filepath.Base(example)) {
			t.Errorf("%s makes git ignore %s", ignore, example)
		}
		b, err := os.ReadFile(example)
		if err != nil {
			t.Errorf("%s has no example: %v", name, err)
			continue
		}
		switch {
		case strings.HasSuffix(name, ".env"):
			if got, want := envKeys(string(b)), envKeys(localSecretFiles[name]); !slices.Equal(got, want) {
				t.Errorf("%s names %v; the overlay is rendered with %v", example, got, want)
			}
		case file == "tokens":
			if _, err := server.LoadTokens(example); err == nil {
				t.Errorf("gravelerd accepts %s copied unedited: it must hold no token", example)
			}
		}

		// Without the file: kustomize refuses, naming it.
		fill := maps.Clone(localSecretFiles)
		delete(fill, name)
		overlay := filepath.Dir(filepath.Dir(name))
		_, err = renderObjects(filesys.MakeFsOnDisk(), filepath.Join(deployCopy(t, fill), overlay))
		if err == nil || !strings.Contains(err.Error(), filepath.Join(filepath.Base(filepath.Dir(name)), file)) {
			t.Errorf("%s renders without %s (%v); it must stop and name the file", overlay, name, err)
		}
	}

	// A file filled with a template's placeholder is caught.
	fill := maps.Clone(localSecretFiles)
	fill["overlays/s3/secrets/s3-credentials.env"] = "AWS_ACCESS_KEY_ID=REPLACE_ME\nAWS_SECRET_ACCESS_KEY=REPLACE_ME\n"
	r := renderFS(t, filesys.MakeFsOnDisk(), filepath.Join(deployCopy(t, fill), "overlays/s3"))
	if errs := checkNoPlaceholders(r); len(errs) != 2 {
		t.Errorf("credentials left as REPLACE_ME: findings %v, want one per key", errs)
	}
}

// gitignores applies the patterns of a .gitignore (names without '/', as
// the manifests' are) to file: the last matching line wins.
func gitignores(t *testing.T, gitignore, file string) bool {
	t.Helper()
	ignored := false
	for _, line := range strings.Split(string(readFile(t, gitignore)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		if ok, err := path.Match(strings.TrimPrefix(line, "!"), file); err != nil {
			t.Fatalf("%s: %q: %v", gitignore, line, err)
		} else if ok {
			ignored = !neg
		}
	}
	return ignored
}

// envKeys lists the keys of an env file's KEY=value lines.
func envKeys(content string) []string {
	var keys []string
	for _, line := range strings.Split(content, "\n") {
		line = strings.TrimSpace(line)
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// placeholderRE matches the values a template asks to be replaced.
var placeholderRE = regexp.MustCompile(`(?i)replace[_-]?me|change[_-]?me|fill[_-]?me`)

// checkNoPlaceholders finds ConfigMap and Secret values that would be
// applied as a template left them.
func checkNoPlaceholders(r *rendered) []error {
	var errs []error
	for _, name := range sortedKeys(r.secrets) {
		s := r.secrets[name]
		for k, v := range s.StringData {
			if placeholderRE.MatchString(v) {
				errs = append(errs, fmt.Errorf("Secret %s key %s holds the placeholder %q", name, k, placeholderRE.FindString(v)))
			}
		}
		for k, v := range s.Data {
			if placeholderRE.Match(v) {
				errs = append(errs, fmt.Errorf("Secret %s key %s holds the placeholder %q", name, k, placeholderRE.Find(v)))
			}
		}
	}
	for _, name := range sortedKeys(r.configMaps) {
		for k, v := range r.configMaps[name].Data {
			if placeholderRE.MatchString(v) {
				errs = append(errs, fmt.Errorf("ConfigMap %s key %s holds the placeholder %q", name, k, placeholderRE.FindString(v)))
			}
		}
	}
	return errs
}

// checkPods applies the rules every workload follows.
func checkPods(t *testing.T, r *rendered, df *dockerfile) {
	for where, tmpl := range r.podTemplates() {
		spec := &tmpl.Spec
		sc := spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("%s: pod must set runAsNonRoot and a non-zero runAsUser", where)
		}
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: the service account token must not be mounted (nothing calls the Kubernetes API)", where)
		}
		for _, c := range spec.Containers {
			csc := c.SecurityContext
			if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
				csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
				csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
				t.Errorf("%s/%s: container must have a read-only root, no privilege escalation, and drop ALL capabilities", where, c.Name)
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s/%s: container must request cpu and memory and limit memory", where, c.Name)
			}
			name, tag, ok := strings.Cut(c.Image, ":")
			if !ok || tag == "" || tag == "latest" {
				t.Errorf("%s/%s: image %q must be pinned to a tag", where, c.Name, c.Image)
			}
			if target, ok := strings.CutPrefix(name, imageRepo); ok {
				st, ok := df.stages[target]
				if !ok {
					t.Errorf("%s/%s: image %s is not a target of the Dockerfile", where, c.Name, c.Image)
				} else if uid, _, _ := strings.Cut(st.user, ":"); sc != nil && sc.RunAsUser != nil && strconv.FormatInt(*sc.RunAsUser, 10) != uid {
					t.Errorf("%s/%s: runAsUser %d differs from the image's USER %s", where, c.Name, *sc.RunAsUser, st.user)
				}
			}
			for _, m := range c.VolumeMounts {
				if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) &&
					!slices.ContainsFunc(r.statefulSetClaims(where), func(n string) bool { return n == m.Name }) {
					t.Errorf("%s/%s: volumeMount %s has no volume", where, c.Name, m.Name)
				}
			}
		}
		for _, v := range spec.Volumes {
			switch {
			case v.PersistentVolumeClaim != nil:
				if _, ok := r.pvcs[v.PersistentVolumeClaim.ClaimName]; !ok {
					t.Errorf("%s: volume %s claims %s, which is not rendered", where, v.Name, v.PersistentVolumeClaim.ClaimName)
				}
			case v.Secret != nil:
				// A Certificate's Secret is written by cert-manager.
				if _, ok := r.secrets[v.Secret.SecretName]; !ok && r.certificateBySecret(v.Secret.SecretName) == nil {
					t.Errorf("%s: volume %s uses Secret %s, which is neither rendered nor a Certificate's secretName", where, v.Name, v.Secret.SecretName)
				}
			}
		}
	}
}

func (r *rendered) statefulSetClaims(where string) []string {
	name, ok := strings.CutPrefix(where, "StatefulSet/")
	if !ok {
		return nil
	}
	var out []string
	for _, c := range r.statefulSets[name].Spec.VolumeClaimTemplates {
		out = append(out, c.Name)
	}
	return out
}

// checkEtcd parses the etcd arguments with the etcd server's own flag set
// (the version in go.mod is the image's), and checks the cluster wiring.
func checkEtcd(t *testing.T, r *rendered) {
	ss, ok := r.statefulSets["etcd"]
	if !ok {
		t.Fatal("no etcd StatefulSet")
	}
	svc, ok := r.services[ss.Spec.ServiceName]
	if !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd serviceName %q must be a rendered headless Service publishing not-ready addresses", ss.Spec.ServiceName)
	}
	if !selectorMatches(svc.Spec.Selector, ss.Spec.Template.Labels) || !selectorMatches(ss.Spec.Selector.MatchLabels, ss.Spec.Template.Labels) {
		t.Errorf("etcd selectors do not match the pod labels")
	}
	if ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd podManagementPolicy must be Parallel so that all members start and form a quorum")
	}
	replicas := int(*ss.Spec.Replicas)
	if r.dir != "overlays/dev" && replicas != 3 {
		t.Errorf("etcd has %d members, want 3", replicas)
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if !strings.HasSuffix(c.Image, ":v"+etcdVersion(t)) {
		t.Errorf("etcd image %s: want the version the code is built and tested against, v%s", c.Image, etcdVersion(t))
	}
	scheme := "https"
	if slices.Contains(plaintextOverlays, r.dir) {
		scheme = "http"
	}
	var peerURLs []string
	for i := range replicas {
		pod := fmt.Sprintf("%s-%d", ss.Name, i)
		env := r.containerEnv(t, pod, c)
		args := expandArgs(t, "etcd", c.Args, env)
		cfg, fs, clusterState, err := parseEtcdArgs(args)
		if err != nil {
			t.Fatalf("etcd %s: arguments rejected by etcd's flag set: %v", pod, err)
		}
		if fs.NArg() != 0 || clusterState != "new" {
			t.Errorf("etcd %s: positional arguments %v or --initial-cluster-state %q (want new)", pod, fs.Args(), clusterState)
		}
		get := func(name string) string { return fs.Lookup(name).Value.String() }
		if cfg.Name != pod {
			t.Errorf("etcd member name %q, want the pod name %q", cfg.Name, pod)
		}
		// <pod>.<service> resolves through the pod's DNS search path in any
		// namespace, so the certificates need not name the namespace.
		want := fmt.Sprintf("%s://%s.%s:2380", scheme, pod, svc.Name)
		if get("initial-advertise-peer-urls") != want {
			t.Errorf("etcd %s advertises peer URL %s, want %s (stable name under the headless Service)", pod, get("initial-advertise-peer-urls"), want)
		}
		if want := fmt.Sprintf("%s://%s.%s:2379", scheme, pod, svc.Name); get("advertise-client-urls") != want {
			t.Errorf("etcd %s advertises client URL %s, want %s", pod, get("advertise-client-urls"), want)
		}
		peerURLs = append(peerURLs, cfg.Name+"="+get("initial-advertise-peer-urls"))
		if i == replicas-1 {
			if cfg.InitialCluster != strings.Join(peerURLs, ",") {
				t.Errorf("etcd --initial-cluster=%s, want %s (every member's advertised peer URL)", cfg.InitialCluster, strings.Join(peerURLs, ","))
			}
		}
		if cfg.AutoCompactionMode != "periodic" || cfg.AutoCompactionRetention == "" || cfg.AutoCompactionRetention == "0" {
			t.Errorf("etcd auto-compaction must be on (periodic with a retention): mode %q retention %q", cfg.AutoCompactionMode, cfg.AutoCompactionRetention)
		}
		if cfg.QuotaBackendBytes <= 0 {
			t.Errorf("etcd --quota-backend-bytes must be set")
		}
		for _, vct := range ss.Spec.VolumeClaimTemplates {
			if size := vct.Spec.Resources.Requests.Storage(); size.Value() < 2*cfg.QuotaBackendBytes {
				t.Errorf("etcd volume %s (%s) must hold at least twice the quota %d (defrag needs room)", vct.Name, size, cfg.QuotaBackendBytes)
			}
		}
		if _, m := volumeFor(&ss.Spec.Template.Spec, c, cfg.Dir); m == nil || !slices.Contains(r.statefulSetClaims("StatefulSet/"+ss.Name), m.Name) {
			t.Errorf("etcd data dir %s is not on the member's PersistentVolumeClaim", cfg.Dir)
		}
		if cfg.MaxTxnOps < 128 || cfg.MaxRequestBytes < 1572864 {
			t.Errorf("etcd max-txn-ops %d / max-request-bytes %d below the limits graveler is built for (128, 1.5 MiB)", cfg.MaxTxnOps, cfg.MaxRequestBytes)
		}
		metricsPort, _ := containerPort(c, "metrics")
		if !strings.HasSuffix(get("listen-metrics-urls"), fmt.Sprintf(":%d", metricsPort)) {
			t.Errorf("etcd metrics listen %s is not the container port metrics (%d)", get("listen-metrics-urls"), metricsPort)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != intstr.FromString("metrics") {
				t.Errorf("etcd probes must be HTTP on the metrics port")
			}
		}
	}
	// gravelerd's endpoints are exactly the members' client URLs.
	cm := r.configMap(t, "graveler-config")
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("%s://%s-%d.%s:2379", scheme, ss.Name, i, svc.Name))
	}
	if got := cm.Data["GRAVELER_ETCD_ENDPOINTS"]; got != strings.Join(want, ",") {
		t.Errorf("GRAVELER_ETCD_ENDPOINTS=%s, want every member: %s", got, strings.Join(want, ","))
	}
}

// parseEtcdArgs parses etcd's arguments with the etcd server's own flag
// set, plus the few flags the etcd binary adds to it (etcdmain's config.go).
func parseEtcdArgs(args []string) (cfg *embed.Config, fs *flag.FlagSet, clusterState string, err error) {
	cfg = embed.NewConfig()
	fs = flag.NewFlagSet("etcd", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	cfg.AddFlags(fs)
	fs.Func("initial-cluster-state", "new or existing", func(v string) error {
		if v != "new" && v != "existing" {
			return fmt.Errorf("%q is not new or existing", v)
		}
		clusterState = v
		return nil
	})
	fs.String("config-file", "", "")
	fs.String("discovery-fallback", "", "")
	fs.String("v2-deprecation", "", "")
	err = fs.Parse(args)
	return cfg, fs, clusterState, err
}

var etcdVersionRE = regexp.MustCompile(`(?m)^\s*go\.etcd\.io/etcd/server/v3 v(\S+)`)

// etcdVersion is the etcd server version in go.mod.
func etcdVersion(t *testing.T) string {
	m := etcdVersionRE.FindSubmatch(readFile(t, filepath.Join(repoRoot, "go.mod")))
	if m == nil {
		t.Fatal("go.etcd.io/etcd/server/v3 not in go.mod")
	}
	return string(m[1])
}

func portOf(t *testing.T, what, addr string) int32 {
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Errorf("%s %q is not host:port", what, addr)
	}
	return int32(n)
}

// checkGravelerd checks the Deployment against gravelerd's real flags.
func checkGravelerd(t *testing.T, r *rendered) {
	d, ok := r.deployments["gravelerd"]
	if !ok {
		t.Fatal("no gravelerd Deployment")
	}
	minReplicas := int32(2)
	if r.dir == "overlays/dev" {
		minReplicas = 1
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < minReplicas {
		t.Errorf("gravelerd replicas %v, want at least %d", d.Spec.Replicas, minReplicas)
	}
	pod := d.Spec.Template
	if !selectorMatches(d.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("gravelerd selector does not match its pods")
	}
	c := pod.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, imageRepo+"gravelerd:") {
		t.Errorf("gravelerd image %s", c.Image)
	}
	env := r.containerEnv(t, "gravelerd-0", c)

	// Every GRAVELER_* variable is one of gravelerd's flags, and its value
	// is accepted: gravelerd applies the variables before parsing --help.
	bin := binary(t, "gravelerd")
	flags := helpFlags(t, bin)
	grav := map[string]string{}
	for k, v := range env {
		if name, ok := envFlag(k); ok {
			grav[k] = v
			if !flags[name] {
				t.Errorf("gravelerd: %s sets --%s, which `gravelerd --help` does not list", k, name)
			}
		}
	}
	if out, code := helpRun(t, bin, grav, "--help"); code != 0 {
		t.Errorf("gravelerd rejects the manifest's environment (exit %d):\n%s", code, out)
	}
	for _, a := range c.Args {
		if name, ok := flagName(a); ok && !flags[name] {
			t.Errorf("gravelerd: argument %s is not a flag of gravelerd", a)
		}
	}
	for _, k := range []string{"GRAVELER_LISTEN", "GRAVELER_METRICS_LISTEN", "GRAVELER_ETCD_ENDPOINTS", "GRAVELER_ETCD_PREFIX",
		"GRAVELER_DATA_DIR", "GRAVELER_RANGE_CACHE_DIR", "GRAVELER_STORAGE_NAMESPACE_ROOT", "GRAVELER_TOKENS_FILE"} {
		if env[k] == "" {
			t.Errorf("gravelerd: %s is not set", k)
		}
	}

	// Ports and probes: the gRPC port serves the health service.
	grpcPort, ok := containerPort(c, "grpc")
	if !ok || grpcPort != portOf(t, "GRAVELER_LISTEN", env["GRAVELER_LISTEN"]) {
		t.Errorf("gravelerd container port grpc %d is not GRAVELER_LISTEN %s", grpcPort, env["GRAVELER_LISTEN"])
	}
	if host, _, _ := net.SplitHostPort(env["GRAVELER_LISTEN"]); host != "" && host != "0.0.0.0" && host != "::" {
		t.Errorf("gravelerd listens on %s: probes and the Service cannot reach it", env["GRAVELER_LISTEN"])
	}
	metricsPort, ok := containerPort(c, "metrics")
	if !ok || metricsPort != portOf(t, "GRAVELER_METRICS_LISTEN", env["GRAVELER_METRICS_LISTEN"]) || metricsPort == grpcPort {
		t.Errorf("gravelerd container port metrics %d is not GRAVELER_METRICS_LISTEN %s (a separate listener)", metricsPort, env["GRAVELER_METRICS_LISTEN"])
	}
	if pod.Annotations["prometheus.io/port"] != strconv.Itoa(int(metricsPort)) {
		t.Errorf("gravelerd prometheus.io/port annotation %q is not the metrics port %d", pod.Annotations["prometheus.io/port"], metricsPort)
	}
	serviceName := gravelerv1.GravelerService_ServiceDesc.ServiceName
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.GRPC == nil || p.GRPC.Port != grpcPort {
			t.Errorf("gravelerd %s probe must be a native gRPC probe on port %d", name, grpcPort)
			continue
		}
		if svc := p.GRPC.Service; svc != nil && *svc != "" && *svc != serviceName {
			t.Errorf("gravelerd %s probe asks for health of %q; the health service knows \"\" and %q", name, *svc, serviceName)
		}
	}
	if p := c.ReadinessProbe; p != nil && p.GRPC != nil && (p.GRPC.Service == nil || *p.GRPC.Service != serviceName) {
		t.Errorf("gravelerd readiness must ask for %q (SERVING only while etcd answers)", serviceName)
	}

	// Writable paths are volumes; the tokens file comes from the Secret.
	for _, k := range []string{"GRAVELER_DATA_DIR", "GRAVELER_RANGE_CACHE_DIR"} {
		v, m := volumeFor(&pod.Spec, c, env[k])
		if v == nil || m.ReadOnly || (v.EmptyDir == nil && v.PersistentVolumeClaim == nil) {
			t.Errorf("gravelerd %s=%s is not on a writable volume (the root file system is read-only)", k, env[k])
		}
	}
	if v, _ := volumeFor(&pod.Spec, c, env["GRAVELER_RANGE_CACHE_DIR"]); v != nil && v.EmptyDir != nil {
		size, err := resource.ParseQuantity(env["GRAVELER_RANGE_CACHE_SIZE"])
		if v.EmptyDir.SizeLimit == nil || err != nil || v.EmptyDir.SizeLimit.Cmp(size) <= 0 {
			t.Errorf("gravelerd range cache emptyDir sizeLimit %v must exceed GRAVELER_RANGE_CACHE_SIZE %s", v.EmptyDir.SizeLimit, env["GRAVELER_RANGE_CACHE_SIZE"])
		}
	}
	tokens := env["GRAVELER_TOKENS_FILE"]
	if v, _ := volumeFor(&pod.Spec, c, tokens); v == nil || v.Secret == nil {
		t.Errorf("gravelerd tokens file %s is not mounted from a Secret", tokens)
	} else if s := r.secrets[v.Secret.SecretName]; s == nil {
		t.Errorf("tokens Secret %s not rendered", v.Secret.SecretName)
	} else if content, ok := secretValue(s, path.Base(tokens)); !ok {
		t.Errorf("tokens Secret %s has no key %s", s.Name, path.Base(tokens))
	} else {
		// gravelerd's own loader: an overlay must hold a token; the base
		// holds a placeholder gravelerd refuses, naming what to fill.
		f := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := server.LoadTokens(f)
		switch {
		case r.dir == "base" && (err == nil || !strings.Contains(err.Error(), "holds no token")):
			t.Errorf("the base's tokens Secret %s must be an empty placeholder that gravelerd refuses; LoadTokens: %v", s.Name, err)
		case r.dir != "base" && err != nil:
			t.Errorf("tokens Secret %s would not let gravelerd start: %v", s.Name, err)
		}
	}
	// The profiler exposes memory contents and costs CPU: never on in a
	// manifest.
	if v, ok := env["GRAVELER_ENABLE_PPROF"]; ok && v != "" && v != "false" {
		t.Errorf("gravelerd: GRAVELER_ENABLE_PPROF=%s; the profiler must stay off in the manifests", v)
	}
	for _, a := range c.Args {
		if name, ok := flagName(a); ok && name == "enable-pprof" && !strings.HasSuffix(a, "=false") {
			t.Errorf("gravelerd: argument %s turns the profiler on; it must stay off in the manifests", a)
		}
	}
	switch root := env["GRAVELER_STORAGE_NAMESPACE_ROOT"]; {
	case strings.HasPrefix(root, "file://"):
		if v, _ := volumeFor(&pod.Spec, c, strings.TrimPrefix(root, "file://")); v == nil || v.PersistentVolumeClaim == nil {
			t.Errorf("gravelerd blob store %s must be a shared PersistentVolumeClaim, not per-pod storage", root)
		} else if pvc := r.pvcs[v.PersistentVolumeClaim.ClaimName]; pvc != nil && *d.Spec.Replicas > 1 &&
			!slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteMany) {
			t.Errorf("gravelerd blob volume %s is shared by %d replicas and must be ReadWriteMany", pvc.Name, *d.Spec.Replicas)
		}
	case strings.HasPrefix(root, "s3://"):
		if env["AWS_ACCESS_KEY_ID"] == "" || env["AWS_SECRET_ACCESS_KEY"] == "" || env["AWS_REGION"] == "" {
			t.Errorf("gravelerd with an S3 blob store needs AWS_REGION and credentials in its environment")
		}
		if _, ok := r.pvcs["graveler-blobs"]; ok {
			t.Errorf("the S3 overlay must not keep the shared blob volume")
		}
	default:
		t.Errorf("gravelerd GRAVELER_STORAGE_NAMESPACE_ROOT=%q: want file:// or s3://", root)
	}
	shutdown, err := time.ParseDuration(env["GRAVELER_SHUTDOWN_TIMEOUT"])
	if err != nil || pod.Spec.TerminationGracePeriodSeconds == nil ||
		time.Duration(*pod.Spec.TerminationGracePeriodSeconds)*time.Second <= shutdown {
		t.Errorf("terminationGracePeriodSeconds must exceed GRAVELER_SHUTDOWN_TIMEOUT %q", env["GRAVELER_SHUTDOWN_TIMEOUT"])
	}

	// Service and PodDisruptionBudget select these pods and name real ports.
	svc, ok := r.services["gravelerd"]
	if !ok || !selectorMatches(svc.Spec.Selector, pod.Labels) {
		t.Errorf("gravelerd Service missing or not selecting the pods")
	} else {
		for _, p := range svc.Spec.Ports {
			if _, ok := containerPort(c, p.TargetPort.StrVal); !ok {
				t.Errorf("gravelerd Service port %s targets %q, not a named container port", p.Name, p.TargetPort.String())
			}
		}
	}
	pdb, ok := r.pdbs["gravelerd"]
	if !ok || pdb.Spec.Selector == nil || !selectorMatches(pdb.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("gravelerd PodDisruptionBudget missing or not selecting the pods")
	} else if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
		t.Errorf("gravelerd PDB minAvailable %v with %d replicas would block every drain", pdb.Spec.MinAvailable, *d.Spec.Replicas)
	}
}

// checkCleaner checks the CronJob against the cleaner's real flags.
func checkCleaner(t *testing.T, r *rendered) {
	cj, ok := r.cronJobs["graveler-cleaner"]
	if !ok {
		t.Fatal("no graveler-cleaner CronJob")
	}
	if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("cleaner concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	job := cj.Spec.JobTemplate.Spec
	if job.BackoffLimit == nil || job.ActiveDeadlineSeconds == nil {
		t.Errorf("cleaner Job needs backoffLimit and activeDeadlineSeconds")
	}
	c := job.Template.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, imageRepo+"cleaner:") {
		t.Errorf("cleaner image %s", c.Image)
	}
	env := r.containerEnv(t, "cleaner", c)
	args := expandArgs(t, "cleaner", c.Args, env)
	if !slices.Contains(args, "--once") {
		t.Errorf("cleaner CronJob must run --once: %v", args)
	}
	bin := binary(t, "cleaner")
	flags := helpFlags(t, bin)
	// The cleaner reads GRAVELER_* variables too: each must be one of its
	// flags (a gravelerd-only variable here would be silently ignored), and
	// its value accepted.
	grav := map[string]string{}
	for k, v := range env {
		if name, ok := envFlag(k); ok {
			grav[k] = v
			if !flags[name] {
				t.Errorf("cleaner: %s sets --%s, which `cleaner --help` does not list", k, name)
			}
		}
	}
	if out, code := helpRun(t, bin, grav, "--help"); code != 0 {
		t.Errorf("cleaner rejects the CronJob's environment (exit %d):\n%s", code, out)
	}
	values := map[string]string{}
	for _, a := range args {
		name, ok := flagName(a)
		if !ok {
			t.Errorf("cleaner: positional argument %q", a)
			continue
		}
		if !flags[name] {
			t.Errorf("cleaner: %s is not a flag of `cleaner --help`", a)
		}
		_, v, _ := strings.Cut(a, "=")
		values[name] = v
	}
	// The values parse: flags before --help are parsed and type-checked.
	if out, code := helpRun(t, bin, nil, append(slices.Clone(args), "--help")...); code != 0 {
		t.Errorf("cleaner rejects the CronJob's arguments (exit %d):\n%s", code, out)
	}
	gcm := r.configMap(t, "graveler-config")
	if values["etcd-prefix"] != gcm.Data["GRAVELER_ETCD_PREFIX"] {
		t.Errorf("cleaner --etcd-prefix=%q differs from gravelerd's %q", values["etcd-prefix"], gcm.Data["GRAVELER_ETCD_PREFIX"])
	}
	if values["etcd-endpoints"] != gcm.Data["GRAVELER_ETCD_ENDPOINTS"] {
		t.Errorf("cleaner --etcd-endpoints=%q differs from gravelerd's %q", values["etcd-endpoints"], gcm.Data["GRAVELER_ETCD_ENDPOINTS"])
	}
	if d, err := time.ParseDuration(values["timeout"]); err != nil || job.ActiveDeadlineSeconds == nil ||
		time.Duration(*job.ActiveDeadlineSeconds)*time.Second <= d {
		t.Errorf("cleaner --timeout=%q must be set and below activeDeadlineSeconds, so a run ends by itself", values["timeout"])
	}
}
