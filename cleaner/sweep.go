package cleaner

import (
	"fmt"
	"maps"
	"slices"

	"go.uber.org/zap"

	"graveler/keys"
)

// sweep drops repository and staging partitions nothing references. The
// order of reads is what makes it safe; see the package doc.
func (r *pass) sweep() error {
	if r.c.lister == nil {
		r.c.log.Warn("cleaner: the store cannot list partitions; orphan sweep skipped")
		return nil
	}
	now := r.c.cfg.Now()
	// 1. What exists.
	repoParts, err := r.list(keys.RepositoryPartitionPrefix())
	if err != nil {
		return err
	}
	stagingParts, err := r.list(keys.StagingPartitionPrefix())
	if err != nil {
		return err
	}
	// 2. Records (any state), then 3. the work list: a retire queues before
	// it removes the record, so reading in this order misses neither.
	records, err := r.scanRecords()
	if err != nil {
		return err
	}
	queuedRepos, queuedTokens, err := r.scanQueue()
	if err != nil {
		return err
	}
	refParts := map[string]bool{}
	for _, rec := range records {
		refParts[string(keys.RepositoryPartition(rec.name, string(rec.rec.UniqueID)))] = true
	}
	for _, it := range queuedRepos {
		refParts[string(keys.RepositoryPartition(it.repo, it.uid))] = true
	}
	// 4. Branches of referenced partitions: a queued repository's tokens are
	// the drain's to drop, so they count as referenced here too.
	refTokens := map[string]bool{}
	for _, it := range queuedTokens {
		refTokens[it.tok] = true
	}
	for _, p := range slices.Sorted(maps.Keys(refParts)) {
		if r.dropped[p] {
			continue
		}
		owner, _, err := keys.ParseRepositoryPartition([]byte(p))
		if err != nil {
			return fmt.Errorf("%w: sweep: %w", ErrRunFailed, err)
		}
		if err := r.branchTokens([]byte(p), owner, refTokens); err != nil {
			return fmt.Errorf("%w: sweep: %w", ErrRunFailed, err)
		}
	}

	candidates := map[string]bool{}
	for _, p := range repoParts {
		if refParts[p] || r.dropped[p] {
			continue
		}
		candidates[p] = true
		name, uid, err := keys.ParseRepositoryPartition([]byte(p))
		if err != nil {
			r.fail(err, "unparsable repository partition", zap.String("partition", p))
			continue
		}
		if r.unsure[name] {
			// Its record does not decode: this may be the live incarnation.
			r.sum.Skipped++
			continue
		}
		if !r.oldEnough(p, uid, now) {
			r.sum.Skipped++
			continue
		}
		if !r.budget() {
			return nil
		}
		before := r.sum.KeysReclaimed
		if err := r.drop([]byte(p), kindRepository, reasonOrphan); err != nil {
			r.fail(err, "drop orphan repository partition", zap.String("partition", p))
			continue
		}
		if r.sum.KeysReclaimed > before {
			r.sum.OrphanRepositoryPartitions++
			r.c.log.Info("cleaner: "+r.did("reclaimed", "would reclaim")+" orphan repository partition", zap.String("partition", p),
				zap.Int64("keys", r.sum.KeysReclaimed-before), zap.Bool("dry_run", r.c.cfg.DryRun))
		}
	}
	for _, p := range stagingParts {
		if r.dropped[p] {
			continue
		}
		tok, err := keys.ParseStagingPartition([]byte(p))
		if err != nil {
			r.fail(err, "unparsable staging partition", zap.String("partition", p))
			continue
		}
		if refTokens[tok] {
			continue
		}
		if r.mayBeUnsure(tok) {
			r.sum.Skipped++
			continue
		}
		candidates[p] = true
		if !r.oldEnough(p, tokenID(tok), now) {
			r.sum.Skipped++
			continue
		}
		if !r.budget() {
			return nil
		}
		before := r.sum.KeysReclaimed
		if err := r.drop([]byte(p), kindStaging, reasonOrphan); err != nil {
			r.fail(err, "drop orphan staging partition", zap.String("partition", p))
			continue
		}
		if r.sum.KeysReclaimed > before {
			r.sum.OrphanStagingPartitions++
			r.c.log.Info("cleaner: "+r.did("reclaimed", "would reclaim")+" orphan staging partition", zap.String("partition", p),
				zap.Int64("keys", r.sum.KeysReclaimed-before), zap.Bool("dry_run", r.c.cfg.DryRun))
		}
	}
	r.forgetSeen(candidates)
	return nil
}

func (r *pass) list(prefix []byte) ([]string, error) {
	var out []string
	for p, err := range r.c.lister.ListPartitions(r.ctx, prefix) {
		if err != nil {
			return nil, fmt.Errorf("%w: list partitions %q: %w", ErrRunFailed, prefix, err)
		}
		out = append(out, string(p))
	}
	return out, nil
}

// forgetSeen keeps only the two-pass candidates still unreferenced and
// present, so one that was referenced in between starts its grace again.
func (r *pass) forgetSeen(candidates map[string]bool) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	for p := range r.c.seen {
		if !candidates[p] || r.dropped[p] {
			delete(r.c.seen, p)
		}
	}
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }
