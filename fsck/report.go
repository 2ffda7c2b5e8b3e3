package fsck

import (
	"cmp"
	"slices"
	"time"
)

// Severity says how bad a finding is.
type Severity string

const (
	// SeverityError: data is damaged or unreachable; a client may already
	// see errors.
	SeverityError Severity = "error"
	// SeverityWarning: nothing is lost, but something needs an operator
	// (garbage piling up, a cluster near its limits).
	SeverityWarning Severity = "warning"
)

// Kind names a class of finding. Each has a fixed severity and action
// (Kinds) and a section in docs/operations.md.
type Kind string

const (
	KindRecordUndecodable       Kind = "record_undecodable"
	KindBranchDangling          Kind = "branch_dangling"
	KindTagDangling             Kind = "tag_dangling"
	KindCommitParentMissing     Kind = "commit_parent_missing"
	KindCommitGeneration        Kind = "commit_generation_mismatch"
	KindCommitIDMismatch        Kind = "commit_id_mismatch"
	KindMetaRangeMissing        Kind = "metarange_missing"
	KindMetaRangeCorrupt        Kind = "metarange_corrupt"
	KindRangeMissing            Kind = "range_missing"
	KindRangeCorrupt            Kind = "range_corrupt"
	KindRangeOutOfBounds        Kind = "range_out_of_bounds"
	KindStagingOrphaned         Kind = "staging_orphaned"
	KindRepositoryInitialStale  Kind = "repository_initial_stale"
	KindRepositoryDeletingStale Kind = "repository_deleting_stale"
	KindSealedTokensPiled       Kind = "sealed_tokens_piled"
	KindTombstonesHigh          Kind = "tombstones_high"
	KindEtcdAlarm               Kind = "etcd_alarm"
	KindEtcdDBSize              Kind = "etcd_db_size_high"
	KindEtcdHashMismatch        Kind = "etcd_hash_mismatch"
	KindEtcdMemberUnreachable   Kind = "etcd_member_unreachable"
)

// KindInfo is the fixed part of every finding of a kind.
type KindInfo struct {
	Severity Severity
	// Action is what an operator should do.
	Action string
}

// Kinds describes every kind of finding.
var Kinds = map[Kind]KindInfo{
	KindRecordUndecodable: {SeverityError,
		"a record in etcd does not decode: restore it from an etcd snapshot or a dump (gravelerctl dump/restore), or remove the key with etcdctl once nothing needs it; the cleaner keeps what it may reference meanwhile"},
	KindBranchDangling: {SeverityError,
		"the branch's head commit record is gone: move the branch to a commit that exists (gravelerctl reset-hard REPO BRANCH REF, with --force if the branch has staged changes to discard), or restore the commit record from an etcd snapshot or a dump"},
	KindTagDangling: {SeverityError,
		"the tag's commit record is gone: delete the tag and create it again on an existing commit (gravelerctl tag delete, tag create), or restore the commit record from an etcd snapshot or a dump"},
	KindCommitParentMissing: {SeverityError,
		"history below this commit is cut: restore the parent's record from an etcd snapshot or a dump; log and merge-base stop at the gap meanwhile"},
	KindCommitGeneration: {SeverityError,
		"the commit's stored generation is wrong, so log order and merge bases may be wrong: restore the record from an etcd snapshot or a dump"},
	KindCommitIDMismatch: {SeverityError,
		"the commit record's content does not hash to its key: it was altered; restore it from an etcd snapshot or a dump"},
	KindMetaRangeMissing: {SeverityError,
		"the commit's data is gone from the blob store: restore the object (bucket versioning, a replica or a backup of the storage namespace); reads of the commit fail until then"},
	KindMetaRangeCorrupt: {SeverityError,
		"the object is damaged: restore it from a versioned or replicated copy of the storage namespace; reads of the commit fail until then"},
	KindRangeMissing: {SeverityError,
		"part of the commit's data is gone from the blob store: restore the object (bucket versioning, a replica or a backup of the storage namespace); reads in its key span fail until then"},
	KindRangeCorrupt: {SeverityError,
		"the object is damaged: restore it from a versioned or replicated copy of the storage namespace; reads in its key span fail until then"},
	KindRangeOutOfBounds: {SeverityError,
		"the range does not match its metarange entry, so lookups may miss keys: restore both objects from a copy of the storage namespace"},
	KindStagingOrphaned: {SeverityWarning,
		"nothing references these staged keys: run gravelerfsck --repair to queue the partition for the cleaner, or run the cleaner with --sweep"},
	KindRepositoryInitialStale: {SeverityWarning,
		"a create crashed half-way; the name cannot be reused until the record is retired: run the cleaner (it retires it), or read the repository once (gravelerctl repo get), which retires it too"},
	KindRepositoryDeletingStale: {SeverityWarning,
		"a delete stopped half-way: run the cleaner, which finishes it, or delete the repository again (gravelerctl repo delete)"},
	KindSealedTokensPiled: {SeverityWarning,
		"commits on this branch keep failing after sealing: look at gravelerd's commit errors; the next successful commit absorbs the sealed tokens"},
	KindTombstonesHigh: {SeverityWarning,
		"many staged deletes slow every read of the branch: commit the branch (or reset it) so they are applied"},
	KindEtcdAlarm: {SeverityError,
		"etcd raised an alarm: for NOSPACE compact, defragment every member and disarm (see Quota); for CORRUPT replace the member (see Members)"},
	KindEtcdDBSize: {SeverityWarning,
		"the member's database is close to the quota: compact and defragment (see Defragmentation), or raise --quota-backend-bytes"},
	KindEtcdHashMismatch: {SeverityError,
		"members hold different data at one revision: stop writes, take a snapshot from a member you trust, and replace the others from it"},
	KindEtcdMemberUnreachable: {SeverityWarning,
		"this member did not answer: check it (etcdctl endpoint health --cluster); its hash could not be compared"},
}

// Finding is one problem found.
type Finding struct {
	Kind       Kind     `json:"kind"`
	Severity   Severity `json:"severity"`
	Repository string   `json:"repository,omitempty"`
	// Resource names what is wrong: "branch main", "range <id> in <ns>",
	// "staging partition staging/<token>", "etcd member <name>".
	Resource string `json:"resource"`
	// Detail says what was seen.
	Detail string `json:"detail"`
	// Action says what to do.
	Action string `json:"action"`
}

// Stats counts what a run examined.
type Stats struct {
	// Repositories by state (initial, active, deleting); records that do
	// not decode are counted under "undecodable".
	Repositories map[string]int `json:"repositories"`
	Branches     int            `json:"branches"`
	Tags         int            `json:"tags"`
	Commits      int            `json:"commits"`
	// UnreachableCommits: commit records no branch or tag reaches (left by
	// commits that lost a race, or by deleted branches); their objects are
	// not checked.
	UnreachableCommits int `json:"unreachable_commits"`
	// MetaRanges and Ranges: distinct objects checked.
	MetaRanges int `json:"metaranges"`
	Ranges     int `json:"ranges"`
	// RangeBytes: bytes of ranges read and verified (Full only).
	RangeBytes int64 `json:"range_bytes"`
	// StagingTokens of live branches (staging and sealed), with their
	// entries and tombstones.
	StagingTokens int   `json:"staging_tokens"`
	StagedEntries int64 `json:"staged_entries"`
	Tombstones    int64 `json:"tombstones"`
	// StagingPartitions listed; of them Orphaned found, Queued waiting
	// for the cleaner (a work item names the token or its repository),
	// Young unreferenced but within the grace, Unsure unreferenced but
	// possibly named by a record that does not decode.
	StagingPartitions  int `json:"staging_partitions"`
	OrphanedPartitions int `json:"orphaned_partitions"`
	QueuedPartitions   int `json:"queued_partitions"`
	YoungPartitions    int `json:"young_partitions"`
	UnsurePartitions   int `json:"unsure_partitions"`
	// Work items in graveler_deleted.
	QueuedTokens       int `json:"queued_tokens"`
	QueuedRepositories int `json:"queued_repositories"`
}

// Member is what one etcd member said.
type Member struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	DBSize   int64  `json:"db_size"`
	// DBSizeInUse is the part of DBSize that holds data; the rest is
	// freed by a defragmentation.
	DBSizeInUse     int64  `json:"db_size_in_use"`
	Hash            uint32 `json:"hash,omitempty"`
	CompactRevision int64  `json:"compact_revision,omitempty"`
	Error           string `json:"error,omitempty"`
}

// Etcd is the cluster's health as the run saw it.
type Etcd struct {
	Members    []Member `json:"members"`
	Alarms     []string `json:"alarms,omitempty"`
	QuotaBytes int64    `json:"quota_bytes"`
	// HashesCompared: members whose hashes at the report's revision were
	// compared (those with the same compaction revision).
	HashesCompared int `json:"hashes_compared"`
}

// BranchStaging counts the staged entries of one branch, over its staging
// and sealed tokens; only branches with staged entries are listed.
type BranchStaging struct {
	Repository   string `json:"repository"`
	Branch       string `json:"branch"`
	Tokens       int    `json:"tokens"`
	SealedTokens int    `json:"sealed_tokens"`
	Entries      int64  `json:"entries"`
	Tombstones   int64  `json:"tombstones"`
}

// Repair is one thing a repair did, or chose not to do.
type Repair struct {
	// Action: "queued", "skipped" or "failed".
	Action   string `json:"action"`
	Resource string `json:"resource"`
	Detail   string `json:"detail"`
}

// Report is the outcome of one run.
type Report struct {
	// Revision is the etcd revision every check read (0 if none).
	Revision        int64     `json:"revision"`
	Started         time.Time `json:"started"`
	DurationSeconds float64   `json:"duration_seconds"`
	Full            bool      `json:"full"`
	Repair          bool      `json:"repair"`
	// Healthy: complete, and nothing found.
	Healthy bool `json:"healthy"`
	// Incomplete: some checks could not be made; Problems say which.
	Incomplete bool            `json:"incomplete"`
	Problems   []string        `json:"problems,omitempty"`
	Stats      Stats           `json:"stats"`
	Etcd       Etcd            `json:"etcd"`
	Staging    []BranchStaging `json:"staging,omitempty"`
	Findings   []Finding       `json:"findings"`
	Repairs    []Repair        `json:"repairs,omitempty"`
}

// Count returns the findings of kind k.
func (r *Report) Count(k Kind) int {
	n := 0
	for _, f := range r.Findings {
		if f.Kind == k {
			n++
		}
	}
	return n
}

// finish orders what concurrent checks appended and sets Healthy.
func (r *Report) finish(now time.Time) {
	sev := func(s Severity) int {
		if s == SeverityError {
			return 0
		}
		return 1
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(sev(a.Severity), sev(b.Severity)), cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.Repository, b.Repository), cmp.Compare(a.Resource, b.Resource))
	})
	slices.SortFunc(r.Staging, func(a, b BranchStaging) int {
		return cmp.Or(cmp.Compare(a.Repository, b.Repository), cmp.Compare(a.Branch, b.Branch))
	})
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	r.DurationSeconds = now.Sub(r.Started).Seconds()
	r.Incomplete = r.Incomplete || len(r.Problems) > 0
	r.Healthy = !r.Incomplete && len(r.Findings) == 0
}
