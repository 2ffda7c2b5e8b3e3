package cleaner_test

import (
	"fmt"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/kv"
)

// BenchmarkGCSweep measures a collection of one repository with 1,000
// commits (each changing a few keys of a tree of about 30 ranges, so a
// few thousand committed objects) and 500 objects of failed commits to
// delete each time: objects/s is committed objects listed and decided per
// second of the whole collection (mark included), deleted/s the deletes.
// The refs live in memory: the blob store is what is measured.
func BenchmarkGCSweep(b *testing.B) {
	for _, name := range []string{"file", "s3"} {
		b.Run(name, func(b *testing.B) {
			var be gcBackend
			if name == "file" {
				be = fileBackend(b)
			} else {
				be = s3Backend(b)
			}
			w := newGCWorld(b, kv.NewMemoryStore(), be, gcGrace)
			ns := w.createRepo("bench")
			w.mustCommit("bench", "main", "base/", 240)
			for i := range 1000 {
				if _, err := w.commit(w.g, "bench", "main", fmt.Sprintf("base/%04d", (i*37)%240), 1, false); err != nil {
					b.Fatal(err)
				}
			}
			c := cleaner.New(w.store, w.cleanerConfig(gcGrace))
			var listed, deleted int64
			var elapsed time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				var garbage []string
				for range 5 {
					garbage = append(garbage, w.plant(ns, 800)...)
				}
				be.age(b, ns, garbage, 10*time.Hour)
				b.StartTimer()
				start := time.Now()
				sum, err := c.Collect(w.ctx)
				elapsed += time.Since(start)
				if err != nil || sum.Errors != 0 || sum.GC.Commits < 1000 {
					b.Fatalf("collect: %v, %+v", err, sum.GC)
				}
				listed += sum.GC.Listed
				deleted += sum.GC.Deleted
			}
			b.ReportMetric(float64(listed)/elapsed.Seconds(), "objects/s")
			b.ReportMetric(float64(deleted)/elapsed.Seconds(), "deleted/s")
		})
	}
}
