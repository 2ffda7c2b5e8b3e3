package cleaner

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	_ "graveler/buildinfo/metric" // graveler_build_info on the daemon's /metrics
)

const (
	kindStaging    = "staging"
	kindRepository = "repository"
	kindBranch     = "branch"
	reasonDeleted  = "deleted"
	reasonOrphan   = "orphan"
	// kindNamespaceClaim: a storage namespace claim (skipped records only).
	kindNamespaceClaim = "namespace_claim"
)

var (
	runsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_runs_total",
		Help: "Cleaner passes by outcome (ok, incomplete: stopped at --max-keys or --timeout, error: failed steps or an aborted pass).",
	}, []string{"outcome"})
	runDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "graveler_cleaner_run_duration_seconds",
		Help:    "Duration of cleaner passes.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 18),
	})
	partitionsReclaimed = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_partitions_reclaimed_total",
		Help: "Partitions dropped by the cleaner, by kind (staging, repository) and reason (deleted: from the work list, orphan: found by the sweep).",
	}, []string{"kind", "reason"})
	keysReclaimed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_keys_reclaimed_total",
		Help: "Keys deleted by the cleaner's partition drops.",
	})
	entriesRemovedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_work_items_removed_total",
		Help: "graveler_deleted entries removed after their partitions were dropped.",
	})
	retiredTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_repositories_retired_total",
		Help: "Repository records (deleting, or initial past the creation timeout) retired by the cleaner.",
	})
	skippedRecords = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_cleaner_skipped_records_total",
		Help: "Repository, branch and storage namespace claim records the cleaner could not decode and passed over, by kind (repository, branch, namespace_claim); each counts once per pass. Whatever such a record may reference is kept.",
	}, []string{"kind"})
	errorsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_cleaner_errors_total",
		Help: "Cleaner steps that failed and are retried by the next pass.",
	})
	backlog = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_cleaner_backlog",
		Help: "graveler_deleted entries found at the start of the last pass.",
	})
	leader = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_cleaner_leader",
		Help: "1 while this cleaner process leads and runs passes.",
	})
)

func observeRun(s *Summary, err error) {
	runDuration.Observe(s.Duration.Seconds())
	switch {
	case err != nil || s.Errors > 0:
		runsTotal.WithLabelValues("error").Inc()
		if err != nil {
			errorsTotal.Inc()
		}
	case s.Incomplete:
		runsTotal.WithLabelValues("incomplete").Inc()
	default:
		runsTotal.WithLabelValues("ok").Inc()
	}
}

var (
	gcRunsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "graveler_gc_runs_total",
		Help: "Collections of unreferenced committed objects by outcome (ok; error: a namespace's sweep stopped at a failed read; aborted: stopped before sweeping).",
	}, []string{"outcome"})
	gcDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "graveler_gc_duration_seconds",
		Help:    "Duration of collections of unreferenced committed objects.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 20),
	})
	gcMarked = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_gc_objects_marked",
		Help: "Metaranges and ranges the last collection found referenced by a commit.",
	})
	gcListed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_objects_listed_total",
		Help: "Committed blobs listed by collections: objects stored on their own, and packs.",
	})
	gcDeleted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_objects_deleted_total",
		Help: "Unreferenced committed objects older than the grace period deleted by collections (not in dry runs).",
	})
	gcBytesDeleted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_bytes_deleted_total",
		Help: "Bytes of the objects collections deleted (not in dry runs).",
	})
	gcKeptYoung = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_objects_kept_young_total",
		Help: "Unreferenced committed objects kept because they are younger than the grace period.",
	})
	gcNamespacesAborted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_namespaces_aborted_total",
		Help: "Sweeps of a storage namespace stopped by a read that failed (nothing more deleted there).",
	})
	gcLastSuccess = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "graveler_gc_last_success_timestamp_seconds",
		Help: "When the last collection that swept every namespace without a failure ended (Unix time).",
	})
	gcNamespaceObjectsDeleted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_gc_namespace_objects_deleted_total",
		Help: "Objects deleted from the storage namespaces of reclaimed (deleted) repositories.",
	})
)

func observeGC(s *GCSummary, dryRun bool) {
	gcDuration.Observe(s.Duration.Seconds())
	gcMarked.Set(float64(s.Marked))
	gcListed.Add(float64(s.Listed))
	gcKeptYoung.Add(float64(s.KeptYoung))
	gcNamespacesAborted.Add(float64(s.NamespacesAborted))
	if !dryRun {
		gcDeleted.Add(float64(s.Deleted))
		gcBytesDeleted.Add(float64(s.BytesDeleted))
	}
	switch {
	case s.Aborted:
		gcRunsTotal.WithLabelValues("aborted").Inc()
	case s.NamespacesAborted > 0:
		gcRunsTotal.WithLabelValues("error").Inc()
	default:
		gcRunsTotal.WithLabelValues("ok").Inc()
		gcLastSuccess.SetToCurrentTime()
	}
}
