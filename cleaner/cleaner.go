package cleaner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
)

// Defaults for Config's zero values.
const (
	DefaultInterval   = 5 * time.Minute
	DefaultSweepGrace = time.Hour
	// maxFailures bounds Summary.Failures; Errors still counts them all.
	maxFailures = 20
)

// Config tunes a Cleaner. Zero values take the defaults.
type Config struct {
	// RepositoryCreationTimeout is how long a repository may stay initial
	// before it counts as a crashed create (default
	// ref.DefaultRepositoryCreationTimeout, the timeout gravelerd uses).
	RepositoryCreationTimeout time.Duration
	// Sweep enables the orphan sweep.
	Sweep bool
	// SweepGrace protects young partitions from the sweep (default
	// DefaultSweepGrace; negative: no grace, for tests and offline stores).
	SweepGrace time.Duration
	// DryRun changes nothing and reports what a run would reclaim.
	DryRun bool
	// MaxKeys bounds the keys one run reclaims (0: no bound). It is checked
	// before each partition, so a run may exceed it by one partition's keys.
	MaxKeys int64
	// Timeout bounds one run (0: none). A run cut short is not an error.
	Timeout time.Duration
	// Interval is Run's period (default DefaultInterval).
	Interval time.Duration
	// Elector makes Run work only while this process leads (nil: always).
	Elector Elector
	// Lister lists partitions for the sweep (nil: the store, if it is a
	// PartitionLister).
	Lister PartitionLister
	// Blobs holds the committed data of every storage namespace: the
	// reclaim of a deleted repository empties its namespace there, and GC
	// collects there. Nil: namespaces are left as they are, and GC cannot
	// run.
	Blobs committed.BlobStore
	// GC collects committed objects no commit references (see GCConfig).
	GC GCConfig
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// Logger (default zap.NewNop()).
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.RepositoryCreationTimeout <= 0 {
		c.RepositoryCreationTimeout = ref.DefaultRepositoryCreationTimeout
	}
	if c.SweepGrace == 0 {
		c.SweepGrace = DefaultSweepGrace
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	c.GC = c.GC.withDefaults()
	return c
}

// Summary is what one run did (or, in a dry run, would do).
type Summary struct {
	DryRun bool `json:"dry_run"`
	// RepositoriesRetired: records retired (deleting, or initial past the
	// creation timeout) and queued.
	RepositoriesRetired int `json:"repositories_retired"`
	// RepositoriesReclaimed, TokensReclaimed: work items completed.
	RepositoriesReclaimed int `json:"repositories_reclaimed"`
	// ClaimsBackfilled: active repositories created before storage
	// namespaces were claimed, given their claim (in a dry run: would be).
	ClaimsBackfilled int `json:"claims_backfilled"`
	TokensReclaimed  int `json:"tokens_reclaimed"`
	// EntriesRemoved: graveler_deleted entries removed.
	EntriesRemoved int `json:"entries_removed"`
	// OrphanRepositoryPartitions, OrphanStagingPartitions: dropped by the sweep.
	OrphanRepositoryPartitions int `json:"orphan_repository_partitions"`
	OrphanStagingPartitions    int `json:"orphan_staging_partitions"`
	// PartitionsReclaimed: partitions that held keys and were dropped.
	PartitionsReclaimed int `json:"partitions_reclaimed"`
	// KeysReclaimed: keys in those partitions.
	KeysReclaimed int64 `json:"keys_reclaimed"`
	// Skipped: work left for a later run because it is still referenced
	// (a live token, a repository still being created), may be referenced
	// by a record that does not decode, or is too young to sweep.
	Skipped int `json:"skipped"`
	// SkippedRecords counts repository and branch records that could not
	// be decoded (each once per run): they were reported and passed over,
	// and whatever they might reference was kept.
	SkippedRecords int `json:"skipped_records"`
	// Errors counts failed steps; Failures describes the first few.
	Errors   int      `json:"errors"`
	Failures []string `json:"failures,omitempty"`
	// NamespaceObjectsDeleted: objects deleted from the storage
	// namespaces of reclaimed repositories.
	NamespaceObjectsDeleted int64 `json:"namespace_objects_deleted"`
	// GC is what the collection of unreferenced committed objects did, if
	// this pass ran one.
	GC *GCSummary `json:"gc,omitempty"`
	// Incomplete: the run stopped at MaxKeys or Timeout; the next continues.
	Incomplete bool `json:"incomplete"`
	// StoppedBy says why an incomplete run stopped: StoppedByMaxKeys,
	// StoppedByTimeout, or StoppedByCaller (its context ended).
	StoppedBy string        `json:"stopped_by,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// Values of Summary.StoppedBy.
const (
	StoppedByMaxKeys = "max_keys"
	StoppedByTimeout = "timeout"
	StoppedByCaller  = "canceled"
)

// Cleaner reclaims deleted and orphaned partitions. See the package doc.
type Cleaner struct {
	store  kv.Store
	cfg    Config
	log    *zap.Logger
	refs   *ref.Manager
	lister PartitionLister

	mu sync.Mutex
	// seen remembers when a sweep first found unreferenced a partition
	// whose name carries no creation time, for the two-pass grace.
	seen map[string]time.Time
	// lastGC is when this Cleaner last began a collection.
	lastGC time.Time
	// gcHooks, set by tests only, run between a collection's steps.
	gcHooks *gcHooks
}

// New returns a Cleaner over store. It starts no goroutines.
func New(store kv.Store, cfg Config) *Cleaner {
	cfg = cfg.withDefaults()
	lister := cfg.Lister
	if lister == nil {
		lister, _ = store.(PartitionLister)
	}
	return &Cleaner{
		store: store,
		cfg:   cfg,
		log:   cfg.Logger,
		refs: ref.New(store, ref.Config{
			RepositoryCreationTimeout: cfg.RepositoryCreationTimeout,
			Now:                       cfg.Now,
			Logger:                    cfg.Logger,
			BranchReadWindow:          -1,
		}),
		lister: lister,
		seen:   map[string]time.Time{},
	}
}

// RunOnce makes one bounded pass. It returns an error wrapping
// ErrRunFailed when the pass could not decide safely what to reclaim, or
// the context's error when ctx itself ended; the Summary says what was done
// either way.
func (c *Cleaner) RunOnce(ctx context.Context) (Summary, error) {
	start := time.Now()
	runCtx := ctx
	if c.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
	}
	r := &pass{c: c, ctx: runCtx, parent: ctx, dropped: map[string]bool{}, badRecords: map[string]bool{}, unsure: map[string]bool{}}
	r.sum.DryRun = c.cfg.DryRun
	err := r.do()
	if err == nil && r.ctx.Err() == nil && c.gcDue(c.cfg.Now()) {
		r.collect()
	}
	if err != nil && r.stopped() {
		// Cut short by Timeout: not a failure, the next run continues.
		r.cutShort()
		err = nil
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	r.sum.Duration = time.Since(start)
	observeRun(&r.sum, err)
	fields := []zap.Field{zap.Bool("dry_run", r.sum.DryRun),
		zap.Int("repositories_retired", r.sum.RepositoriesRetired),
		zap.Int("repositories_reclaimed", r.sum.RepositoriesReclaimed),
		zap.Int("tokens_reclaimed", r.sum.TokensReclaimed),
		zap.Int("entries_removed", r.sum.EntriesRemoved),
		zap.Int("orphan_repository_partitions", r.sum.OrphanRepositoryPartitions),
		zap.Int("orphan_staging_partitions", r.sum.OrphanStagingPartitions),
		zap.Int("partitions_reclaimed", r.sum.PartitionsReclaimed),
		zap.Int64("keys_reclaimed", r.sum.KeysReclaimed),
		zap.Int("skipped", r.sum.Skipped),
		zap.Int("skipped_records", r.sum.SkippedRecords),
		zap.Int("errors", r.sum.Errors),
		zap.Bool("incomplete", r.sum.Incomplete),
		zap.String("stopped_by", r.sum.StoppedBy),
		zap.Duration("duration", r.sum.Duration)}
	switch {
	case err != nil && ctx.Err() != nil:
		c.log.Info("cleaner: run stopped", append(fields, zap.Error(err))...)
	case err != nil:
		c.log.Error("cleaner: run failed", append(fields, zap.Error(err))...)
	default:
		c.log.Info("cleaner: run done", fields...)
	}
	return r.sum, err
}

// pass is the state of one run.
type pass struct {
	c      *Cleaner
	ctx    context.Context // bounded by Timeout
	parent context.Context
	sum    Summary
	// dropped holds the partitions this pass dropped (or in a dry run would
	// have), so the sweep neither drops nor counts them twice.
	dropped map[string]bool
	// badRecords holds the undecodable records already reported, so each
	// counts once although a pass reads the records more than once.
	badRecords map[string]bool
	// unsure names the repositories whose references this pass cannot
	// fully read (an undecodable repository record, or an undecodable
	// branch of a live incarnation): nothing that may be theirs is dropped.
	unsure map[string]bool
	// claims holds the storage namespace claims, by "<repo>/<unique id>"
	// of their holder, read after the work list.
	claims map[string]*ref.NamespaceClaim
}

// stopped reports whether the run's own Timeout ended it (not its caller).
func (r *pass) stopped() bool { return r.ctx.Err() != nil && r.parent.Err() == nil }

// cutShort marks the pass incomplete because its context ended, keeping
// the first reason found.
func (r *pass) cutShort() {
	r.sum.Incomplete = true
	if r.sum.StoppedBy == "" {
		r.sum.StoppedBy = StoppedByCaller
		if r.stopped() {
			r.sum.StoppedBy = StoppedByTimeout
		}
	}
}

// did words a log line for what the pass did, or in a dry run would have
// done: a dry run's log must not read as if it had changed anything.
func (r *pass) did(done, would string) string {
	if r.c.cfg.DryRun {
		return would
	}
	return done
}

// budget reports whether the pass may start another partition.
func (r *pass) budget() bool {
	if r.ctx.Err() != nil {
		r.cutShort()
		return false
	}
	if r.c.cfg.MaxKeys > 0 && r.sum.KeysReclaimed >= r.c.cfg.MaxKeys {
		r.sum.Incomplete = true
		if r.sum.StoppedBy == "" {
			r.sum.StoppedBy = StoppedByMaxKeys
		}
		return false
	}
	return true
}

func (r *pass) fail(err error, msg string, fields ...zap.Field) {
	if r.ctx.Err() != nil {
		// The run was cut short: whatever failed is retried next run.
		r.cutShort()
		return
	}
	r.sum.Errors++
	errorsTotal.Inc()
	if len(r.sum.Failures) < maxFailures {
		r.sum.Failures = append(r.sum.Failures, fmt.Sprintf("%s: %v", msg, err))
	}
	r.c.log.Warn("cleaner: "+msg+"; retried next run", append(fields, zap.Error(err))...)
}

type repoItem struct {
	repo, uid string
	// queued: the entry exists (false only in a dry run, for a record that
	// a real run would have queued first).
	queued bool
	// pred is the version of the entry as the work list read it; the entry
	// is removed only at that version, so one queued again meanwhile (by a
	// create that wrote to the partition after it was dropped) survives for
	// the next run. Absent for an entry the work list did not see.
	pred kv.Predicate
}

// tokenItem is a queued staging token and the version of its entry.
type tokenItem struct {
	tok  string
	pred kv.Predicate
}

type record struct {
	name string
	rec  *graveler.Repository
}

func (r *pass) do() error {
	// 1. Retire records that no longer count.
	records, err := r.scanRecords()
	if err != nil {
		return err
	}
	var repos []repoItem
	index := map[string]int{}
	add := func(it repoItem) {
		k := it.repo + "/" + it.uid
		if i, ok := index[k]; ok {
			repos[i].queued = repos[i].queued || it.queued
			if !it.pred.IsAbsent() {
				repos[i].pred = it.pred
			}
			return
		}
		index[k] = len(repos)
		repos = append(repos, it)
	}
	for _, rec := range records {
		if !r.c.refs.Retirable(rec.rec) {
			continue
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		uid := string(rec.rec.UniqueID)
		if r.c.cfg.DryRun {
			r.sum.RepositoriesRetired++
			add(repoItem{repo: rec.name, uid: uid})
			continue
		}
		ok, err := r.c.refs.RetireRepository(r.ctx, graveler.RepositoryID(rec.name), rec.rec.UniqueID)
		if err != nil {
			r.fail(err, "retire repository record", zap.String("repository", rec.name), zap.String("unique_id", uid))
			continue
		}
		if ok {
			r.sum.RepositoriesRetired++
			retiredTotal.Inc()
			r.c.log.Info("cleaner: retired repository record", zap.String("repository", rec.name),
				zap.String("unique_id", uid), zap.String("state", rec.rec.State.String()), zap.Time("created", rec.rec.CreationDate))
			add(repoItem{repo: rec.name, uid: uid, queued: true})
		}
	}

	// 1b. Claims for repositories created before namespaces were claimed,
	// so their namespaces are emptied when they are reclaimed and no
	// create can take them.
	if err := r.backfillClaims(records); err != nil {
		return err
	}

	// 2. The work list, read before the live tokens (see the package doc).
	queuedRepos, queuedTokens, err := r.scanQueue()
	if err != nil {
		return err
	}
	for _, it := range queuedRepos {
		add(it)
	}
	backlog.Set(float64(len(queuedRepos) + len(queuedTokens)))
	if len(repos) > 0 {
		// Again, after the work list: a claim of an incarnation queued
		// since the first scan is the drain's to release.
		if err := r.scanClaims(); err != nil {
			return err
		}
	}

	// 3. Live tokens: never dropped.
	live, err := r.liveTokens()
	if err != nil {
		return err
	}

	// 4. Drain.
	for _, it := range repos {
		if !r.budget() {
			return nil
		}
		r.drainRepo(it, live)
	}
	for _, tok := range queuedTokens {
		if !r.budget() {
			return nil
		}
		r.drainToken(tok, live)
	}

	// 5. Sweep.
	if r.c.cfg.Sweep {
		return r.sweep()
	}
	return nil
}

// backfillClaims claims the namespace of every active repository that
// holds no claim. A namespace two such repositories share is left to the
// first and reported as a failed step naming both.
func (r *pass) backfillClaims(records []record) error {
	if err := r.scanClaims(); err != nil {
		return err
	}
	for _, rec := range records {
		if rec.rec.State != graveler.RepositoryStateActive {
			continue
		}
		if _, ok := r.claims[rec.name+"/"+string(rec.rec.UniqueID)]; ok {
			continue
		}
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		log := []zap.Field{zap.String("repository", rec.name), zap.String("unique_id", string(rec.rec.UniqueID)), zap.String("namespace", string(rec.rec.StorageNamespace))}
		if r.c.cfg.DryRun {
			r.sum.ClaimsBackfilled++
			r.c.log.Info("cleaner: would claim the storage namespace of a repository created before claims", log...)
			continue
		}
		ok, err := r.c.refs.BackfillNamespaceClaim(r.ctx, graveler.RepositoryID(rec.name), rec.rec.UniqueID)
		if err != nil {
			r.fail(err, "claim the storage namespace of a repository created before claims", log...)
			continue
		}
		if ok {
			r.sum.ClaimsBackfilled++
			r.c.log.Info("cleaner: claimed the storage namespace of a repository created before claims", log...)
		}
	}
	return nil
}

// scanRecords reads every repository record, in any state.
func (r *pass) scanRecords() ([]record, error) {
	var out []record
	for e, err := range r.c.store.Scan(r.ctx, keys.Graveler(), kv.ScanOptions{Start: []byte(keys.ReposPrefix)}) {
		if err != nil {
			return nil, fmt.Errorf("%w: scan repository records: %w", ErrRunFailed, err)
		}
		if !strings.HasPrefix(string(e.Key), keys.ReposPrefix) {
			break
		}
		name, err := keys.ParseRepository(e.Key)
		if err != nil {
			// A record that cannot be named protects nothing we can find;
			// leave it to an operator rather than guess.
			r.fail(err, "unparsable repository record key", zap.ByteString("key", e.Key))
			continue
		}
		rec, err := ref.DecodeRepository(e.Value)
		if err != nil {
			// Its incarnation is unknown, so nothing of this name is
			// dropped this run; every other repository goes on.
			r.skipRecord(kindRepository, keys.Graveler(), e.Key, name, err)
			continue
		}
		out = append(out, record{name: name, rec: rec})
	}
	return out, nil
}

// skipRecord reports an undecodable record (once per pass) and, when owner
// is not empty, keeps whatever may belong to that repository this pass.
func (r *pass) skipRecord(kind string, part, key []byte, owner string, err error) {
	if owner != "" {
		r.unsure[owner] = true
	}
	id := string(part) + "\x00" + string(key)
	if r.badRecords[id] {
		return
	}
	r.badRecords[id] = true
	r.sum.SkippedRecords++
	skippedRecords.WithLabelValues(kind).Inc()
	r.c.log.Error("cleaner: undecodable record skipped; what it may reference is kept until it is repaired or removed",
		zap.String("kind", kind), zap.ByteString("partition", part), zap.ByteString("key", key), zap.Error(err))
}

// mayBeUnsure reports whether token may belong to a repository whose
// references this pass could not read. Tokens are minted "<repo>.<id>"
// (ref.Manager.NewStagingToken); one of another shape could be anyone's.
func (r *pass) mayBeUnsure(tok string) bool {
	if len(r.unsure) == 0 {
		return false
	}
	i := strings.LastIndexByte(tok, '.')
	return i <= 0 || r.unsure[tok[:i]]
}

// scanQueue reads graveler_deleted. Keys it cannot parse are reported and
// left alone.
func (r *pass) scanQueue() (repos []repoItem, tokens []tokenItem, err error) {
	for e, err := range r.c.store.Scan(r.ctx, keys.Deleted(), kv.ScanOptions{}) {
		if err != nil {
			return nil, nil, fmt.Errorf("%w: scan %s: %w", ErrRunFailed, keys.PartitionDeleted, err)
		}
		switch {
		case strings.HasPrefix(string(e.Key), keys.ReposPrefix):
			repo, uid, perr := keys.ParseDeletedRepository(e.Key)
			if perr != nil {
				r.fail(perr, "unparsable work item", zap.ByteString("key", e.Key))
				continue
			}
			repos = append(repos, repoItem{repo: repo, uid: uid, queued: true, pred: e.Predicate})
		case strings.HasPrefix(string(e.Key), keys.TokensPrefix):
			tok, perr := keys.ParseDeletedToken(e.Key)
			if perr != nil {
				r.fail(perr, "unparsable work item", zap.ByteString("key", e.Key))
				continue
			}
			tokens = append(tokens, tokenItem{tok: tok, pred: e.Predicate})
		default:
			r.fail(errors.New("unknown prefix"), "unknown work item", zap.ByteString("key", e.Key))
		}
	}
	return repos, tokens, nil
}

// liveTokens collects the staging and sealed tokens of every branch of
// every repository that counts (active, or initial within the timeout).
func (r *pass) liveTokens() (map[string]bool, error) {
	records, err := r.scanRecords()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, rec := range records {
		if rec.rec.State == graveler.RepositoryStateDeleting || r.c.refs.Retirable(rec.rec) {
			continue
		}
		part := keys.RepositoryPartition(rec.name, string(rec.rec.UniqueID))
		if err := r.branchTokens(part, rec.name, live); err != nil {
			return nil, fmt.Errorf("%w: live tokens of repository %s: %w", ErrRunFailed, rec.name, err)
		}
	}
	return live, nil
}

// branchTokens adds to into the tokens of every branch in partition part.
// An undecodable branch is reported and skipped; owner, when not empty,
// names the repository whose other tokens must then be kept this pass.
func (r *pass) branchTokens(part []byte, owner string, into map[string]bool) error {
	for e, err := range r.c.store.Scan(r.ctx, part, kv.ScanOptions{Start: []byte(keys.BranchesPrefix)}) {
		if err != nil {
			return fmt.Errorf("scan branches of %s: %w", part, err)
		}
		if !strings.HasPrefix(string(e.Key), keys.BranchesPrefix) {
			break
		}
		b, err := ref.DecodeBranch(e.Value)
		if err != nil {
			r.skipRecord(kindBranch, part, e.Key, owner, err)
			continue
		}
		if b.StagingToken != "" {
			into[string(b.StagingToken)] = true
		}
		for _, t := range b.SealedTokens {
			into[string(t)] = true
		}
	}
	return nil
}

// getRecord reads the record of repo; found is false when there is none.
// An undecodable record is reported and returned as errUndecodable.
func (r *pass) getRecord(repo string) (rec *graveler.Repository, found bool, err error) {
	data, _, err := r.c.store.Get(r.ctx, keys.Graveler(), keys.Repository(repo))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	rec, err = ref.DecodeRepository(data)
	if err != nil {
		r.skipRecord(kindRepository, keys.Graveler(), keys.Repository(repo), repo, err)
		return nil, false, errUndecodable
	}
	return rec, true, nil
}

// errUndecodable: a record was reported by skipRecord; the work that
// needed it waits for a later run.
var errUndecodable = errors.New("cleaner: undecodable record")

// removeItem removes a work item at the version the work list read. One
// written again since (queued anew after its partitions were dropped)
// stays for the next run: it reports false with no error.
func (r *pass) removeItem(key []byte, pred kv.Predicate) (bool, error) {
	// Conditional: the key is re-queued by anyone who retires or
	// abandons the same incarnation, or deletes a branch with the token.
	err := r.c.store.DeleteIf(r.ctx, keys.Deleted(), key, pred)
	if errors.Is(err, kv.ErrPredicateFailed) {
		r.c.log.Info("cleaner: work item queued again meanwhile; kept for the next run", zap.ByteString("key", key))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	entriesRemovedTotal.Inc()
	return true, nil
}

// incarnationGone reads the repository record again after RetireRepository
// left it alone, and reports whether the incarnation of it is gone (the
// record is missing or names another incarnation), so its data may be
// dropped. Otherwise a create of it finished after all, activating between
// this pass's read and the retire: it is live, and the item is skipped.
func (r *pass) incarnationGone(it repoItem, log []zap.Field) bool {
	rec, found, err := r.getRecord(it.repo)
	switch {
	case errors.Is(err, errUndecodable):
		r.sum.Skipped++
		return false
	case err != nil:
		r.fail(err, "read repository record", log...)
		return false
	case found && string(rec.UniqueID) == it.uid:
		r.sum.Skipped++
		r.c.log.Warn("cleaner: repository became active while being retired; keeping it", log...)
		return false
	}
	return true
}

// drainRepo reclaims one deleted repository incarnation.
func (r *pass) drainRepo(it repoItem, live map[string]bool) {
	log := []zap.Field{zap.String("repository", it.repo), zap.String("unique_id", it.uid)}
	rec, found, err := r.getRecord(it.repo)
	if errors.Is(err, errUndecodable) {
		r.sum.Skipped++ // cannot tell whether it names this incarnation
		return
	}
	if err != nil {
		r.fail(err, "read repository record", log...)
		return
	}
	if found && string(rec.UniqueID) == it.uid {
		switch {
		case rec.State == graveler.RepositoryStateActive:
			// A create finished after the incarnation was queued (it ran
			// past the creation timeout and lost nothing): the entry is
			// stale and must not touch the live partition. A later delete
			// queues it again.
			r.c.log.Warn("cleaner: work item names an active repository; "+r.did("removing", "would remove")+" the item only", log...)
			if !r.c.cfg.DryRun {
				// At the version read: a delete of the repository since
				// then queued it again, and that entry is real work.
				removed, err := r.removeItem(keys.DeletedRepository(it.repo, it.uid), it.pred)
				if err != nil {
					r.fail(err, "remove stale work item", log...)
					return
				}
				if !removed {
					return
				}
			}
			r.sum.EntriesRemoved++
			return
		case !r.c.refs.Retirable(rec):
			r.sum.Skipped++ // still being created
			return
		case !r.c.cfg.DryRun:
			// Normally done by the records step; finish it before dropping.
			retired, err := r.c.refs.RetireRepository(r.ctx, graveler.RepositoryID(it.repo), rec.UniqueID)
			if err != nil {
				r.fail(err, "retire repository record", log...)
				return
			}
			if !retired && !r.incarnationGone(it, log) {
				return
			}
		}
	}
	part := keys.RepositoryPartition(it.repo, it.uid)
	tokens := map[string]bool{}
	// A branch of this dead incarnation that does not decode is skipped:
	// its tokens become orphans, which the sweep reclaims.
	if err := r.branchTokens(part, "", tokens); err != nil {
		r.fail(err, "collect tokens of deleted repository", log...)
		return
	}
	for _, tok := range sortedKeys(tokens) {
		if live[tok] {
			r.sum.Skipped++
			r.c.log.Warn("cleaner: token of a deleted repository is live elsewhere; keeping it", append(log, zap.String("token", tok))...)
			continue
		}
		if !r.budget() {
			return
		}
		if err := r.drop(keys.StagingPartition(tok), kindStaging, reasonDeleted); err != nil {
			r.fail(err, "drop staging partition", append(log, zap.String("token", tok))...)
			return
		}
	}
	if !r.budget() {
		return
	}
	if err := r.drop(part, kindRepository, reasonDeleted); err != nil {
		r.fail(err, "drop repository partition", log...)
		return
	}
	if !r.releaseNamespace(it, log) {
		return
	}
	removed := true
	if it.queued && !r.c.cfg.DryRun {
		if removed, err = r.removeItem(keys.DeletedRepository(it.repo, it.uid), it.pred); err != nil {
			r.fail(err, "remove work item", log...)
			return
		}
	}
	if removed {
		r.sum.EntriesRemoved++
	}
	r.sum.RepositoriesReclaimed++
	r.c.log.Info("cleaner: "+r.did("reclaimed", "would reclaim")+" deleted repository", append(log, zap.Int("tokens", len(tokens)))...)
}

// scanClaims reads every storage namespace claim. An undecodable claim is
// reported and passed over: the incarnation it may name keeps its work
// item, as releaseNamespace cannot tell whether it holds a namespace.
func (r *pass) scanClaims() error {
	r.claims = map[string]*ref.NamespaceClaim{}
	for e, err := range r.c.store.Scan(r.ctx, keys.Graveler(), kv.ScanOptions{Start: []byte(keys.NamespacesPrefix)}) {
		if err != nil {
			return fmt.Errorf("%w: scan namespace claims: %w", ErrRunFailed, err)
		}
		if !strings.HasPrefix(string(e.Key), keys.NamespacesPrefix) {
			break
		}
		c, err := ref.DecodeNamespaceClaim(e.Key, e.Value)
		if err != nil {
			r.skipRecord(kindNamespaceClaim, keys.Graveler(), e.Key, "", err)
			continue
		}
		r.claims[string(c.Repository)+"/"+string(c.UniqueID)] = c
	}
	return nil
}

// releaseNamespace ends the claim a reclaimed incarnation holds on its
// storage namespace, once its partitions are dropped and before its work
// item is removed: the claim is marked reclaiming (after which nothing
// else removes it or takes it over), then released, so no other
// repository holds the namespace meanwhile. It reports whether the work
// item may go; on false the next run tries again. A claim that no longer
// names the incarnation (released, or taken over as stale) is not its
// to release.
func (r *pass) releaseNamespace(it repoItem, log []zap.Field) bool {
	c, ok := r.claims[it.repo+"/"+it.uid]
	if !ok {
		return true
	}
	log = append(log, zap.String("namespace", string(c.Namespace)))
	if r.c.cfg.DryRun {
		// Counts what emptying the namespace would delete.
		n, err := r.emptyNamespace(c.Namespace, it.repo, it.uid)
		r.sum.NamespaceObjectsDeleted += n
		if err != nil {
			r.fail(err, "empty storage namespace", log...)
			return false
		}
		return true
	}
	id, uid := graveler.RepositoryID(it.repo), graveler.UniqueID(it.uid)
	held, err := r.c.refs.ReclaimNamespace(r.ctx, c.Namespace, id, uid)
	if errors.Is(err, kv.ErrQuotaExceeded) {
		// The partitions are dropped already, which is what frees etcd's
		// space; the claim needs a write, so it waits with the work item.
		r.fail(err, "mark storage namespace reclaiming (etcd is out of space: the repository's partitions are dropped; "+
			"its namespace is emptied and released, and its work item removed, once etcd accepts writes again)", log...)
		return false
	}
	if err != nil {
		r.fail(err, "mark storage namespace reclaiming", log...)
		return false
	}
	if !held {
		return true
	}
	// Marked reclaiming: the namespace is this incarnation's alone until
	// released, so emptying it removes no other repository's objects.
	n, err := r.emptyNamespace(c.Namespace, it.repo, it.uid)
	r.sum.NamespaceObjectsDeleted += n
	if err != nil {
		r.fail(err, "empty storage namespace", log...)
		return false
	}
	if err := r.c.refs.ReleaseNamespace(r.ctx, c.Namespace, id, uid); err != nil {
		r.fail(err, "release storage namespace", log...)
		return false
	}
	r.c.log.Info("cleaner: released storage namespace of deleted repository", log...)
	return true
}

// drainToken reclaims one consumed staging token.
func (r *pass) drainToken(it tokenItem, live map[string]bool) {
	tok := it.tok
	log := zap.String("token", tok)
	if live[tok] {
		// A branch delete that stopped between queueing and removing the
		// branch: keep the entry, the branch may still go.
		r.sum.Skipped++
		r.c.log.Warn("cleaner: queued token is still live; keeping it", log)
		return
	}
	if r.mayBeUnsure(tok) {
		r.sum.Skipped++
		r.c.log.Warn("cleaner: queued token may belong to a branch that does not decode; keeping it", log)
		return
	}
	if err := r.drop(keys.StagingPartition(tok), kindStaging, reasonDeleted); err != nil {
		r.fail(err, "drop staging partition", log)
		return
	}
	removed := true
	if !r.c.cfg.DryRun {
		var err error
		if removed, err = r.removeItem(keys.DeletedToken(tok), it.pred); err != nil {
			r.fail(err, "remove work item", log)
			return
		}
	}
	if removed {
		r.sum.EntriesRemoved++
	}
	r.sum.TokensReclaimed++
}

// drop drops (or in a dry run counts) a partition.
func (r *pass) drop(part []byte, kind, reason string) error {
	if r.dropped[string(part)] {
		return nil
	}
	var n int64
	var err error
	if r.c.cfg.DryRun {
		n, err = r.count(part)
	} else {
		n, err = kv.DropPartition(r.ctx, r.c.store, part)
	}
	if n > 0 {
		r.sum.PartitionsReclaimed++
		r.sum.KeysReclaimed += n
		if !r.c.cfg.DryRun {
			partitionsReclaimed.WithLabelValues(kind, reason).Inc()
			keysReclaimed.Add(float64(n))
		}
		r.c.log.Debug("cleaner: "+r.did("dropped", "would drop")+" partition", zap.ByteString("partition", part), zap.Int64("keys", n), zap.Bool("dry_run", r.c.cfg.DryRun))
	}
	if err != nil {
		return err
	}
	r.dropped[string(part)] = true
	return nil
}

// count counts a partition's keys, through the lister when it can.
func (r *pass) count(part []byte) (int64, error) {
	if pc, ok := r.c.lister.(PartitionCounter); ok {
		return pc.CountPartition(r.ctx, part)
	}
	var n int64
	for _, err := range r.c.store.Scan(r.ctx, part, kv.ScanOptions{}) {
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// oldEnough applies the sweep's grace to a partition whose name ends in id.
func (r *pass) oldEnough(part, id string, now time.Time) bool {
	grace := r.c.cfg.SweepGrace
	if grace < 0 {
		return true
	}
	if born, ok := ref.IDTime(id); ok {
		return now.Sub(born) >= grace
	}
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	first, ok := r.c.seen[part]
	if !ok {
		r.c.seen[part] = now
		return false
	}
	return now.Sub(first) >= grace
}

// tokenID is the unique part of a staging token "<repo>.<id>".
func tokenID(tok string) string {
	if i := strings.LastIndexByte(tok, '.'); i >= 0 {
		return tok[i+1:]
	}
	return tok
}
