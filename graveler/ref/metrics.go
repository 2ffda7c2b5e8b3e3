package ref

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	branchUpdateRetries = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_branch_update_retries_total",
		Help: "Branch read-modify-SetIf (and branch delete) attempts retried after losing the compare-and-swap.",
	})
	branchUpdateGiveUps = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_branch_update_give_ups_total",
		Help: "Branch updates and deletes that gave up with ErrTooManyRetries.",
	})
	branchReads = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_branch_reads_total",
		Help: "Amortized branch reads that went to the kv store.",
	})
	branchReadsSaved = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_branch_reads_saved_total",
		Help: "Branch reads served by joining a concurrent amortized read instead of the kv store.",
	})
	repositoryReads = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_repository_reads_total",
		Help: "Amortized repository reads that went to the kv store.",
	})
	repositoryReadsSaved = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_repository_reads_saved_total",
		Help: "Repository reads served by joining a concurrent amortized read instead of the kv store.",
	})
	commitCacheHits = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_commit_cache_hits_total",
		Help: "Commit record reads served from the in-memory commit cache.",
	})
	repositoriesExpired = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_repositories_expired_total",
		Help: "Repositories left in the initial state past the creation timeout and queued for deletion.",
	})
)
