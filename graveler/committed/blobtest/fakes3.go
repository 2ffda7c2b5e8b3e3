package blobtest

import (
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"graveler/graveler/committed"
)

// FakeS3 is an S3-compatible server on 127.0.0.1 for tests: a real S3
// client talks HTTP to it.
type FakeS3 struct {
	// Config points a bucket store at the server.
	Config committed.BucketConfig
	// Clock is the server's clock: modification times come from it.
	Clock *Clock
}

// StartFakeS3 starts a FakeS3 holding buckets, stopped by t.Cleanup, and
// points the AWS configuration chain at static test credentials (through
// t.Setenv, so not in parallel tests).
func StartFakeS3(t testing.TB, buckets ...string) FakeS3 {
	t.Helper()
	clock := &Clock{}
	backend := s3mem.New(s3mem.WithTimeSource(clock))
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	// No skew limit: the server's clock may be moved ahead of the client's.
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithTimeSource(clock), gofakes3.WithTimeSkewLimit(0)).Server())
	t.Cleanup(srv.Close)
	empty := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "test-key",
		"AWS_SECRET_ACCESS_KEY":       "test-secret",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             empty,
		"AWS_SHARED_CREDENTIALS_FILE": empty,
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
	return FakeS3{
		Config: committed.BucketConfig{S3Endpoint: srv.URL, S3Region: "us-east-1", S3ForcePathStyle: true},
		Clock:  clock,
	}
}

// Clock is the real time moved by an offset. Safe for concurrent use.
type Clock struct{ offset atomic.Int64 }

// Now returns the real time plus the offset, in UTC as S3 reports it.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())).UTC() }

// Since is Now().Sub(t).
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// Advance moves the clock forward by d (back, if negative).
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }
