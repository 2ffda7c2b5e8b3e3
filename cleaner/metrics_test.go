package cleaner_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"graveler/cleaner"
	"graveler/kv"
)

func metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// TestMetrics: a real pass counts what it reclaimed; a dry run does not.
func TestMetrics(t *testing.T) {
	store := kv.NewMemoryStore()
	newWorld(t, store, shape{live: 1, dead: 1, branches: 1, commits: 1, entries: 5})
	names := []string{"graveler_cleaner_keys_reclaimed_total", "graveler_cleaner_partitions_reclaimed_total",
		"graveler_cleaner_work_items_removed_total", "graveler_cleaner_run_duration_seconds"}
	before := map[string]float64{}
	for _, n := range names {
		before[n] = metric(t, n, nil)
	}
	dry := testConfig(cleaner.NewMemoryLister(store))
	dry.DryRun = true
	if _, err := cleaner.New(store, dry).RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, n := range names[:3] {
		if got := metric(t, n, nil); got != before[n] {
			t.Errorf("dry run moved %s by %v", n, got-before[n])
		}
	}
	sum, err := cleaner.New(store, testConfig(cleaner.NewMemoryLister(store))).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := metric(t, names[0], nil) - before[names[0]]; got != float64(sum.KeysReclaimed) {
		t.Errorf("keys reclaimed metric moved by %v, summary says %d", got, sum.KeysReclaimed)
	}
	if got := metric(t, names[1], map[string]string{"reason": "orphan"}); got < 2 {
		t.Errorf("orphan partitions metric %v, want >= 2", got)
	}
	if got := metric(t, names[3], nil) - before[names[3]]; got != 2 {
		t.Errorf("run duration observed %v times, want 2", got)
	}
}
