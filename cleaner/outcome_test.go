package cleaner_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"graveler/buildinfo"
	"graveler/cleaner"
	"graveler/kv"
)

// TestStoppedBy: an incomplete pass says which bound stopped it, so that
// the command can tell an operator.
func TestStoppedBy(t *testing.T) {
	store := kv.NewMemoryStore()
	newWorld(t, store, fixture)
	cfg := testConfig(cleaner.NewMemoryLister(store))
	cfg.MaxKeys = 1
	sum, err := cleaner.New(store, cfg).RunOnce(t.Context())
	if err != nil || !sum.Incomplete || sum.StoppedBy != cleaner.StoppedByMaxKeys {
		t.Fatalf("with MaxKeys 1: %+v, %v", sum, err)
	}
	cfg = testConfig(cleaner.NewMemoryLister(store))
	cfg.Timeout = time.Nanosecond
	sum, err = cleaner.New(store, cfg).RunOnce(t.Context())
	if err != nil || !sum.Incomplete || sum.StoppedBy != cleaner.StoppedByTimeout {
		t.Fatalf("with an expired timeout: %+v, %v", sum, err)
	}
	sum, err = cleaner.New(store, testConfig(cleaner.NewMemoryLister(store))).RunOnce(t.Context())
	if err != nil || sum.Incomplete || sum.StoppedBy != "" {
		t.Fatalf("unbounded: %+v, %v", sum, err)
	}
}

// TestDryRunLogSaysWould: a dry run's log never reads as if it had
// reclaimed or dropped anything; the real run's does.
func TestDryRunLogSaysWould(t *testing.T) {
	store := kv.NewMemoryStore()
	newWorld(t, store, fixture)
	messages := func(dry bool) []string {
		core, logs := observer.New(zapcore.DebugLevel)
		cfg := testConfig(cleaner.NewMemoryLister(store))
		cfg.DryRun = dry
		cfg.Logger = zap.New(core)
		sum, err := cleaner.New(store, cfg).RunOnce(t.Context())
		if err != nil || sum.KeysReclaimed == 0 || sum.RepositoriesReclaimed == 0 || sum.OrphanStagingPartitions == 0 {
			t.Fatalf("dry run %v: %+v, %v", dry, sum, err)
		}
		var msgs []string
		for _, e := range logs.All() {
			msgs = append(msgs, e.Message)
		}
		return msgs
	}
	var would int
	for _, m := range messages(true) {
		if strings.Contains(m, "reclaimed") || strings.Contains(m, "dropped") || strings.Contains(m, "removing") {
			t.Errorf("dry run logs %q", m)
		}
		if strings.Contains(m, "would reclaim") {
			would++
		}
	}
	if would == 0 {
		t.Error("dry run logs nothing it would reclaim")
	}
	var reclaimed int
	for _, m := range messages(false) {
		if strings.Contains(m, "would") {
			t.Errorf("real run logs %q", m)
		}
		if strings.Contains(m, "reclaimed") {
			reclaimed++
		}
	}
	if reclaimed == 0 {
		t.Error("real run logs nothing reclaimed")
	}
}

// TestBuildInfoMetric: the cleaner daemon's /metrics names its build.
func TestBuildInfoMetric(t *testing.T) {
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "graveler_build_info" || len(mf.GetMetric()) != 1 {
			continue
		}
		m := mf.GetMetric()[0]
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["version"] != buildinfo.Version || labels["goversion"] != runtime.Version() || m.GetGauge().GetValue() != 1 {
			t.Fatalf("graveler_build_info %v = %v", labels, m.GetGauge().GetValue())
		}
		return
	}
	t.Fatal("graveler_build_info is not registered")
}
