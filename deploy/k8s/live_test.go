package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"

	"graveler/etcdkv"
	"graveler/keys"
	"graveler/kv"
)

// The tests in this file run the real binaries against an embedded etcd
// (in-process, no network or cluster needed); -short skips them.
func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the run of the real binaries against an embedded etcd")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestGravelerdAnswersItsProbes runs the real gravelerd binary with the
// base Deployment's environment against an etcd started with the base's
// etcd arguments, TLS and client certificates included (only the addresses
// and paths are moved to loopback and a temp dir, and the certificates are
// issued as the Certificates say), and asks what the kubelet asks: every
// gRPC probe of the manifest must get SERVING on the probed port, and the
// metrics port must serve /metrics. Then SIGTERM must end it within the
// pod's grace period.
func TestGravelerdAnswersItsProbes(t *testing.T) {
	skipShort(t)
	r := render(t, "base")
	d := r.deployments["gravelerd"]
	c := d.Spec.Template.Spec.Containers[0]
	env := r.containerEnv(t, "gravelerd-0", c)

	dir := t.TempDir()
	secrets := filepath.Join(dir, "secrets")
	issueCertificates(t, r, secrets)
	endpoint := startRenderedEtcd(t, r, secrets)
	if ca, cert, key := moveEtcdClientFiles(t, &d.Spec.Template.Spec, c, env, secrets); ca == "" || cert == "" || key == "" {
		t.Fatalf("gravelerd has no etcd client certificate: CA %q, certificate %q, key %q", ca, cert, key)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("test-token probe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	grpcAddr, metricsAddr := freeAddr(t), freeAddr(t)
	env["GRAVELER_LISTEN"] = grpcAddr
	env["GRAVELER_METRICS_LISTEN"] = metricsAddr
	env["GRAVELER_ETCD_ENDPOINTS"] = endpoint
	env["GRAVELER_DATA_DIR"] = filepath.Join(dir, "data")
	env["GRAVELER_RANGE_CACHE_DIR"] = filepath.Join(dir, "cache")
	env["GRAVELER_STORAGE_NAMESPACE_ROOT"] = "file://" + filepath.ToSlash(filepath.Join(dir, "blobs"))
	env["GRAVELER_TOKENS_FILE"] = tokens

	cmd := exec.Command(binary(t, "gravelerd"))
	cmd.Env = []string{"HOME=" + dir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("gravelerd output:\n%s", out.String())
		}
	})

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	_, grpcPort, _ := net.SplitHostPort(grpcAddr)
	for name, p := range map[string]*probeSpec{
		"startup":   probeOf(c.StartupProbe),
		"readiness": probeOf(c.ReadinessProbe),
		"liveness":  probeOf(c.LivenessProbe),
	} {
		if p == nil {
			t.Fatalf("%s probe is not a gRPC probe", name)
		}
		// The manifest's port is the container port; here it is moved.
		if strconv.Itoa(int(p.port)) != mustPort(t, c, "grpc") {
			t.Errorf("%s probe port %d is not the grpc port", name, p.port)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
			cancel()
			if err == nil && resp.Status == healthpb.HealthCheckResponse_SERVING {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s probe (service %q on port %s): %v %v", name, p.service, grpcPort, resp, err)
			}
			select {
			case err := <-exited:
				stopped = true
				t.Fatalf("gravelerd exited: %v", err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body.Bytes(), []byte("graveler_")) {
		t.Errorf("GET /metrics on the metrics port: %s, graveler_ metrics present: %v", resp.Status, bytes.Contains(body.Bytes(), []byte("graveler_")))
	}

	// Kubernetes stops a pod with SIGTERM, then SIGKILL after the grace period.
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("gravelerd after SIGTERM: %v", err)
		}
	case <-time.After(grace):
		t.Errorf("gravelerd did not exit within the grace period %v after SIGTERM", grace)
	}
}

type probeSpec struct {
	port    int32
	service string
}

func probeOf(p *corev1.Probe) *probeSpec {
	if p == nil || p.GRPC == nil {
		return nil
	}
	ps := &probeSpec{port: p.GRPC.Port}
	if p.GRPC.Service != nil {
		ps.service = *p.GRPC.Service
	}
	return ps
}

func mustPort(t *testing.T, c corev1.Container, name string) string {
	t.Helper()
	p, ok := containerPort(c, name)
	if !ok {
		t.Fatalf("container %s has no port %s", c.Name, name)
	}
	return fmt.Sprint(p)
}

// TestCleanerCronJobRuns runs the real cleaner with the base CronJob's
// arguments and environment (only the etcd endpoints and certificate paths
// are moved) against an etcd started with the base's etcd arguments, on
// work queued under gravelerd's etcd prefix: the pass must reclaim it,
// exit 0 and print its JSON summary. This checks more than --help does:
// that the CronJob's --etcd-prefix is gravelerd's, that its client
// certificate is accepted where one without is refused, and that its flag
// values make a working pass.
func TestCleanerCronJobRuns(t *testing.T) {
	skipShort(t)
	r := render(t, "base")
	cj, ok := r.cronJobs["graveler-cleaner"]
	if !ok {
		t.Fatal("no graveler-cleaner CronJob")
	}
	spec := &cj.Spec.JobTemplate.Spec.Template.Spec
	c := spec.Containers[0]
	secrets := filepath.Join(t.TempDir(), "secrets")
	issueCertificates(t, r, secrets)
	endpoint := startRenderedEtcd(t, r, secrets)
	gcm := r.configMap(t, "graveler-config")
	ctx := t.Context()

	// Work as gravelerd leaves it, written with gravelerd's certificate: a
	// consumed staging token, queued.
	gd := r.deployments["gravelerd"]
	genv := r.containerEnv(t, "gravelerd-0", gd.Spec.Template.Spec.Containers[0])
	ca, cert, key := moveEtcdClientFiles(t, &gd.Spec.Template.Spec, gd.Spec.Template.Spec.Containers[0], genv, secrets)
	store, err := etcdkv.New(ctx, etcdkv.Config{Endpoints: []string{endpoint}, Prefix: gcm.Data["GRAVELER_ETCD_PREFIX"],
		TLS: etcdkv.TLSConfig{CAFile: ca, CertFile: cert, KeyFile: key}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	checkRefusesUncertified(t, endpoint, ca)
	tok := "demo.01J00000000000000000000000"
	for i := range 3 {
		if err := store.Set(ctx, keys.StagingPartition(tok), keys.Entry(fmt.Appendf(nil, "k%d", i)), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Set(ctx, keys.Deleted(), keys.DeletedToken(tok), nil); err != nil {
		t.Fatal(err)
	}

	// The kubelet resolves env from the rendered ConfigMap; only the
	// endpoints are moved, so the CronJob's own prefix is what runs.
	env := r.containerEnv(t, "cleaner", c)
	env["GRAVELER_ETCD_ENDPOINTS"] = endpoint
	if ca, cert, key := moveEtcdClientFiles(t, spec, c, env, secrets); ca == "" || cert == "" || key == "" {
		t.Fatalf("the cleaner has no etcd client certificate: CA %q, certificate %q, key %q", ca, cert, key)
	}
	args := expandArgs(t, "cleaner", c.Args, env)
	cmd := exec.CommandContext(ctx, binary(t, "cleaner"), args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cleaner %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	var sum struct {
		TokensReclaimed int   `json:"tokens_reclaimed"`
		EntriesRemoved  int   `json:"entries_removed"`
		KeysReclaimed   int64 `json:"keys_reclaimed"`
		Errors          int   `json:"errors"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &sum); err != nil {
		t.Fatalf("cleaner stdout is not one JSON summary: %v\n%s", err, stdout.String())
	}
	if sum.TokensReclaimed != 1 || sum.EntriesRemoved != 1 || sum.KeysReclaimed != 3 || sum.Errors != 0 {
		t.Errorf("summary %+v; want the queued token and its 3 keys reclaimed, no errors\nstderr:\n%s", sum, stderr.String())
	}
	for _, part := range [][]byte{keys.StagingPartition(tok), keys.Deleted()} {
		var left []string
		for e, err := range store.Scan(ctx, part, kv.ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			left = append(left, string(e.Key))
		}
		if len(left) > 0 {
			t.Errorf("partition %s still holds %v after the pass", part, left)
		}
	}
	if !slices.Contains(args, "--once") {
		t.Errorf("the CronJob's cleaner does not run --once: %v", args)
	}
}
