package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeSide records the phases it runs and reports perPhase(phase) calls of
// 1ms per phase second, so throughputs, and their ratios, are known.
func fakeSide(name, op string, order *[]string, perPhase func(phase int) int) *side {
	return &side{title: name, op: op, run: func(_ context.Context, phase int, d time.Duration) ([]*recorder, time.Duration) {
		*order = append(*order, name+string(rune('0'+phase+1)))
		r := newRecorder()
		for range perPhase(phase) {
			r.observe(op, time.Millisecond, nil)
		}
		return []*recorder{r}, time.Second
	}}
}

// TestCompareAlternatesAndQuotesMedian: after a warm-up of each side the
// phases alternate in pairs of swapped order, and RATIO quotes the median
// of the pairs' ratios (not the ratio of the totals), every pair's ratio,
// the load average and the connections of each side.
func TestCompareAlternatesAndQuotesMedian(t *testing.T) {
	var out bytes.Buffer
	var order []string
	b := &bench{out: &out, duration: 4 * time.Second, pairs: 4, warmup: time.Second, etcdConns: 1}
	// Graveler's phases do 900, 50, 100, 100 calls; raw's always 100:
	// pair ratios 9, 0.5, 1, 1, median 1; the totals would say 2.875.
	g := fakeSide("g", "graveler.put", &order, func(p int) int { return []int{100, 900, 50, 100, 100}[p+1] })
	r := fakeSide("r", "etcd.put", &order, func(int) int { return 100 })
	b.compare(context.Background(), "x", 16, g, r)
	if want := []string{"g0", "r0", "g1", "r1", "r2", "g2", "g3", "r3", "r4", "g4"}; !slices.Equal(order, want) {
		t.Fatalf("phases ran %v, want %v", order, want)
	}
	s := out.String()
	re := regexp.MustCompile(`RATIO x clients=16 graveler/etcd throughput=1\.000 \(\d+ vs \d+ ops/s\) p50=1\.00x p99=1\.00x median of 4 pairs \[9\.000 0\.500 1\.000 1\.000\]; load1 \S+ -> \S+; etcd connections gravelerd=1 raw=1`)
	if !re.MatchString(s) {
		t.Fatalf("no RATIO line with the median of the pairs:\n%s", s)
	}
	if !strings.Contains(s, "g, 4s in 4 phases") || !strings.Contains(s, "r, 4s in 4 phases") {
		t.Fatalf("missing the merged statistics of each side:\n%s", s)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}, {nil, 0}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
