package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
)

var scalingLine = regexp.MustCompile(`^SCALING n=(\d+) k=(\d+) layout=(random|contiguous) commit_ms=(\d+) bytes_written=(-1|\d+) objects_written=(-1|\d+)$`)

// checkScalingOutput checks commit-scaling's output line by line: every
// line that starts with SCALING has exactly the promised shape, and they
// come n by n, k by k, random then contiguous, scalingRounds of each,
// each commit having written something.
func checkScalingOutput(t *testing.T, out string, ns, ks []int) {
	t.Helper()
	var want []string
	for _, n := range ns {
		for _, k := range ks {
			for _, layout := range []string{"random", "contiguous"} {
				for range scalingRounds {
					want = append(want, fmt.Sprintf("n=%d k=%d layout=%s", n, k, layout))
				}
			}
		}
	}
	var got []string
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if !strings.HasPrefix(line, "SCALING") {
			continue
		}
		m := scalingLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("malformed line %q in:\n%s", line, out)
		}
		b, _ := strconv.ParseInt(m[5], 10, 64)
		o, _ := strconv.ParseInt(m[6], 10, 64)
		if b <= 0 || o <= 0 {
			t.Fatalf("a commit of changed keys wrote nothing: %q", line)
		}
		got = append(got, fmt.Sprintf("n=%s k=%s layout=%s", m[1], m[2], m[3]))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("SCALING lines for\n%s\nwant\n%s\noutput:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
}

// TestCommitScalingEmbedded runs commit-scaling end to end with
// --embedded on tiny heads built by CommitSorted.
func TestCommitScalingEmbedded(t *testing.T) {
	c, err := parseFlags([]string{"--embedded", "--embedded-unsafe-no-fsync", "--scenario", "commit-scaling",
		"--sizes-n", "300,3000", "--sizes-k", "20,50"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkScalingOutput(t, out.String(), []int{300, 3000}, []int{20, 50})
	if !strings.Contains(out.String(), "RATIO commit-scaling k=50 layout=random median commit time n=3000/n=300=") {
		t.Fatalf("no ratio of the largest head to the smallest:\n%s", out.String())
	}
}

// TestCommitScalingServer runs commit-scaling against a gravelerd over
// gRPC (heads built through staging), whose file:// namespace is local,
// so writes are counted from its directory; and refuses a head too large
// to build that way.
func TestCommitScalingServer(t *testing.T) {
	ctx := context.Background()
	s, err := startEmbedded(ctx, true, true, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := parseFlags([]string{"--server", s.addr, "--scenario", "commit-scaling", "--sizes-n", "400", "--sizes-k", "30"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(ctx, c, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	checkScalingOutput(t, out.String(), []int{400}, []int{30})
	c, err = parseFlags([]string{"--server", s.addr, "--scenario", "commit-scaling", "--sizes-n", strconv.Itoa(scalingRemoteMaxN + 1)}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, c, io.Discard); err == nil || !strings.Contains(err.Error(), "--embedded") {
		t.Fatalf("a head of %d entries through staging: %v", scalingRemoteMaxN+1, err)
	}
}

func TestCommitScalingFlags(t *testing.T) {
	c, err := parseFlags([]string{"--embedded", "--scenario", "commit-scaling"}, io.Discard)
	if err != nil || fmt.Sprint(c.scaling.n, c.scaling.k) != "[10000 1000000] [1000]" {
		t.Fatalf("defaults: %+v, %v", c.scaling, err)
	}
	for _, args := range [][]string{
		{"--embedded", "--sizes-n", "10,x"},
		{"--embedded", "--sizes-k", "0"},
		{"--embedded", "--sizes-n", "100,1000", "--sizes-k", "101"},
		{"--embedded", "--node-cache-bytes", "-1"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
