package server

import (
	"context"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "graveler/api/graveler/v1"
	"graveler/buildinfo"
	"graveler/graveler"
)

// observed starts a server whose access log goes to an observer that
// records every level.
func observed(t *testing.T, f *fakeService, o GRPCOptions) (*harness, *zapobserver.ObservedLogs) {
	t.Helper()
	core, logs := zapobserver.New(zapcore.DebugLevel)
	o.Logger = zap.New(core)
	return start(t, f, o), logs
}

func getBranch(h *harness) error {
	_, err := h.client.GetBranch(context.Background(), &pb.GetBranchRequest{Name: "repositories/repo1/branches/dev"})
	return err
}

// TestAccessLogSkipsHealthChecks: probes are never logged, not even when
// every call is.
func TestAccessLogSkipsHealthChecks(t *testing.T) {
	h, logs := observed(t, &fakeService{}, GRPCOptions{AccessLog: AccessLogAll})
	hc := healthpb.NewHealthClient(h.conn)
	for range 5 {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := getBranch(h); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.All() {
		if m, _ := e.ContextMap()["method"].(string); m != "/graveler.v1.GravelerService/GetBranch" {
			t.Errorf("logged %q: %v", e.Message, e.ContextMap())
		}
	}
	if n := logs.FilterField(zap.String("method", "/graveler.v1.GravelerService/GetBranch")).Len(); n != 1 {
		t.Fatalf("GetBranch logged %d times, want 1", n)
	}
}

// TestAccessLogFailedCalls: in the default (sampled) mode every failed
// call is logged, at a level that says whose fault it was; with the access
// log off only the server's failures remain.
func TestAccessLogFailedCalls(t *testing.T) {
	for _, tc := range []struct {
		mode  AccessLog
		err   error
		level zapcore.Level
		want  bool
	}{
		{AccessLogSampled, graveler.ErrBranchNotFound, zapcore.InfoLevel, true},
		{AccessLogSampled, graveler.ErrUnavailable, zapcore.WarnLevel, true},
		{AccessLogSampled, nil, zapcore.ErrorLevel, true}, // nil: the fake panics, INTERNAL
		{AccessLogOff, graveler.ErrBranchNotFound, 0, false},
		{AccessLogOff, graveler.ErrUnavailable, zapcore.WarnLevel, true},
		{AccessLogOff, nil, zapcore.ErrorLevel, true},
	} {
		f := &fakeService{branchErr: tc.err}
		h, logs := observed(t, f, GRPCOptions{AccessLog: tc.mode, AccessLogSampleEvery: 1000})
		// The first successful call of a sampled log is its sample: make
		// it, so that the failure is not logged by being sampled.
		if _, err := h.client.ListRepositories(context.Background(), &pb.ListRepositoriesRequest{}); err != nil {
			t.Fatal(err)
		}
		if tc.err != nil {
			if err := getBranch(h); err == nil {
				t.Fatalf("%v: the call succeeded", tc.err)
			}
		} else if _, err := h.client.GetTag(context.Background(), &pb.GetTagRequest{Name: "repositories/repo1/tags/v1"}); err == nil {
			t.Fatal("GetTag on the fake succeeded")
		}
		var got []zapobserver.LoggedEntry
		for _, e := range logs.All() {
			if e.ContextMap()["code"] != "OK" {
				got = append(got, e)
			}
		}
		switch {
		case !tc.want && len(got) != 0:
			t.Errorf("%v, %v: logged %v", tc.mode, tc.err, got[0].ContextMap())
		case tc.want && len(got) != 1:
			t.Errorf("%v, %v: %d lines, want 1", tc.mode, tc.err, len(got))
		case tc.want && (got[0].Level != tc.level || got[0].ContextMap()["request_id"] == ""):
			t.Errorf("%v, %v: logged at %v, want %v: %v", tc.mode, tc.err, got[0].Level, tc.level, got[0].ContextMap())
		}
	}
}

// TestAccessLogSampled: N successful calls make far fewer than N lines,
// each saying how many calls it stands for; AccessLogAll logs them all.
func TestAccessLogSampled(t *testing.T) {
	const n = 300
	count := func(o GRPCOptions) (int, *zapobserver.ObservedLogs) {
		h, logs := observed(t, &fakeService{}, o)
		for range n {
			if err := getBranch(h); err != nil {
				t.Fatal(err)
			}
		}
		return logs.Len(), logs
	}
	got, logs := count(GRPCOptions{})
	if got != n/100 {
		t.Fatalf("sampled: %d lines for %d calls, want %d", got, n, n/100)
	}
	for _, e := range logs.All() {
		if e.Level != zapcore.InfoLevel || e.ContextMap()["sampled_one_in"] != uint64(100) {
			t.Fatalf("sampled line: %v %v", e.Level, e.ContextMap())
		}
	}
	if got, _ := count(GRPCOptions{AccessLog: AccessLogAll}); got != n {
		t.Fatalf("all: %d lines for %d calls", got, n)
	}
	if got, _ := count(GRPCOptions{AccessLog: AccessLogOff}); got != 0 {
		t.Fatalf("off: %d lines for %d successful calls", got, n)
	}
}

// TestAccessLogSlowCalls: a call over the threshold is logged at warn
// although sampling would pass over it.
func TestAccessLogSlowCalls(t *testing.T) {
	h, logs := observed(t, &fakeService{}, GRPCOptions{AccessLogSampleEvery: 1000, SlowCallThreshold: 1})
	for range 3 {
		if err := getBranch(h); err != nil {
			t.Fatal(err)
		}
	}
	slow := logs.FilterMessage("slow request").FilterLevelExact(zapcore.WarnLevel)
	if slow.Len() != 3 || logs.Len() != 3 {
		t.Fatalf("%d slow lines of %d, want 3 of 3: %v", slow.Len(), logs.Len(), logs.All())
	}
}

func TestAccessLogFlag(t *testing.T) {
	var a AccessLog
	for _, s := range []string{"off", "all", "Sampled"} {
		if err := a.Set(s); err != nil || !(a.String() == s || s == "Sampled" && a == AccessLogSampled) {
			t.Fatalf("Set(%q): %v, %v", s, a, err)
		}
	}
	if err := a.Set("some"); err == nil {
		t.Fatal("Set(some) succeeded")
	}
}

// TestGetServerVersion: the RPC and the graveler_build_info gauge name the
// build.
func TestGetServerVersion(t *testing.T) {
	h := start(t, &fakeService{}, GRPCOptions{})
	resp, err := h.client.GetServerVersion(context.Background(), &pb.GetServerVersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetVersion() != buildinfo.Version || resp.GetGoVersion() != runtime.Version() {
		t.Fatalf("GetServerVersion: %v", resp)
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "graveler_build_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["version"] == buildinfo.Version && labels["goversion"] == runtime.Version() && m.GetGauge().GetValue() == 1 {
				return
			}
			t.Fatalf("graveler_build_info: %v = %v", labels, m.GetGauge().GetValue())
		}
	}
	t.Fatal("graveler_build_info is not registered")
}
