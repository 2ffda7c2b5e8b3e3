package fsck

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"graveler/graveler/ref"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// checkBranchStaging counts the staged entries and tombstones of a live
// branch's tokens at rev and checks its sealed tokens.
func (r *run) checkBranchStaging(repo string, br branchRecord, rev int64) error {
	b := br.b
	res := "branch " + br.name
	if n := len(b.SealedTokens); n > r.c.cfg.MaxSealedTokens {
		r.find(KindSealedTokensPiled, repo, res, "%d sealed staging tokens, more than %d", n, r.c.cfg.MaxSealedTokens)
	}
	bs := BranchStaging{Repository: repo, Branch: br.name, SealedTokens: len(b.SealedTokens)}
	toks := []string{string(b.StagingToken)}
	for _, t := range b.SealedTokens {
		toks = append(toks, string(t))
	}
	for _, tok := range toks {
		if tok == "" {
			continue
		}
		bs.Tokens++
		var bad int64
		var firstErr error
		prefix := r.c.store.RawPrefix(keys.StagingPartition(tok))
		err := r.scanPrefix("read staging token "+tok, rev, prefix, false, func(kv *mvccpb.KeyValue) error {
			if !strings.HasPrefix(string(kv.Key[len(prefix):]), keys.EntryPrefix) {
				// The token's range record and seal marker are not
				// entries (keys.StagingRanges, keys.StagingSealed).
				return nil
			}
			bs.Entries++
			var e stagingpb.Entry
			if err := proto.Unmarshal(kv.Value, &e); err != nil || e.GetFormatVersion() == 0 {
				if bad++; firstErr == nil {
					firstErr = fmt.Errorf("key %q: %v", kv.Key[len(prefix):], cmpErr(err, "no format version"))
				}
				return nil
			}
			if e.GetTombstone() {
				bs.Tombstones++
			}
			return nil
		})
		if err != nil {
			return err
		}
		if bad > 0 {
			r.find(KindRecordUndecodable, repo, "staging token "+tok+" of branch "+br.name, "%d staged entries do not decode; the first: %v", bad, firstErr)
		}
	}
	if bs.Tombstones > r.c.cfg.MaxTombstones {
		r.find(KindTombstonesHigh, repo, res, "%d staged tombstones in %d tokens, more than %d", bs.Tombstones, bs.Tokens, r.c.cfg.MaxTombstones)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Stats.StagingTokens += bs.Tokens
	r.rep.Stats.StagedEntries += bs.Entries
	r.rep.Stats.Tombstones += bs.Tombstones
	if bs.Entries > 0 {
		r.rep.Staging = append(r.rep.Staging, bs)
	}
	return nil
}

func cmpErr(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// listStaging lists the staging partitions that hold keys now.
func (r *run) listStaging(ctx context.Context) ([]string, error) {
	var out []string
	for p, err := range r.c.store.ListPartitions(ctx, keys.StagingPartitionPrefix()) {
		if err != nil {
			return nil, fmt.Errorf("%w: list staging partitions: %v", ErrIncomplete, err)
		}
		out = append(out, string(p))
	}
	return out, nil
}

// checkOrphans finds the listed staging partitions nothing references at
// the snapshot's revision and returns their tokens.
func (r *run) checkOrphans(listed []string, s *snapshot) ([]string, error) {
	now := r.c.cfg.Now()
	var orphans []string
	var queued, young, unsure int
	for _, p := range listed {
		tok, err := keys.ParseStagingPartition([]byte(p))
		if err != nil {
			continue
		}
		if ref, ok := s.tokens[tok]; ok {
			if ref.queued {
				queued++
			}
			continue
		}
		if s.queuedTokens[tok] {
			queued++
			continue
		}
		if s.unsure(tok) {
			unsure++
			continue
		}
		// Listed after the revision: judged by what it held then (see
		// the package doc). Created since, it is no orphan.
		has, err := r.hasKeys("read staging partition "+p, s.rev, r.c.store.RawPrefix([]byte(p)))
		if err != nil {
			return nil, err
		}
		if !has {
			continue
		}
		born, known := tokenTime(tok)
		if !r.oldEnough(born, known, now) {
			young++
			continue
		}
		age := "its token carries no creation time"
		if known {
			age = fmt.Sprintf("its token was made %s (%s ago)", born.UTC().Format(time.RFC3339), now.Sub(born).Round(time.Second))
		}
		r.find(KindStagingOrphaned, tokenRepo(tok), "staging partition "+p,
			"no branch and no work item references token %s at revision %d; %s", tok, s.rev, age)
		orphans = append(orphans, tok)
	}
	r.stats(func(st *Stats) {
		st.StagingPartitions = len(listed)
		st.OrphanedPartitions, st.QueuedPartitions, st.YoungPartitions, st.UnsurePartitions = len(orphans), queued, young, unsure
	})
	return orphans, nil
}

// tokenTime is the creation time a token "<repo>.<id>" carries in its id.
func tokenTime(tok string) (time.Time, bool) {
	id := tok
	if i := strings.LastIndexByte(tok, '.'); i >= 0 {
		id = tok[i+1:]
	}
	return ref.IDTime(id)
}

// tokenRepo is the repository a token "<repo>.<id>" was made for.
func tokenRepo(tok string) string {
	if i := strings.LastIndexByte(tok, '.'); i > 0 {
		return tok[:i]
	}
	return ""
}

// oldEnough applies Config.OrphanGrace. A token with no time in its name
// is old enough: one run cannot watch it age, and queueing it is safe
// whatever its age (see repair).
func (r *run) oldEnough(born time.Time, known bool, now time.Time) bool {
	return r.c.cfg.OrphanGrace < 0 || !known || now.Sub(born) >= r.c.cfg.OrphanGrace
}

// repair queues each orphaned token for the cleaner, after reading every
// reference again at the current revision. A token no branch references
// is never referenced again (tokens are fresh names, and a branch names
// its token before any writer can use it), so one still unreferenced now
// may be dropped; SetIf(Absent) leaves a work item already queued alone.
func (r *run) repair(orphans []string) error {
	if beforeRepair != nil {
		beforeRepair()
	}
	rev, err := r.currentRevision()
	if err != nil {
		return err
	}
	s, err := r.collect(rev, false)
	if err != nil {
		return err
	}
	marker := []byte(r.c.cfg.Now().UTC().Format(time.RFC3339Nano))
	for _, tok := range orphans {
		res := "staging partition " + string(keys.StagingPartition(tok))
		item := keys.PartitionDeleted + "/" + string(keys.DeletedToken(tok))
		_, referenced := s.tokens[tok]
		skip := ""
		switch {
		case referenced:
			skip = fmt.Sprintf("a branch references it at revision %d", rev)
		case s.queuedTokens[tok]:
			skip = fmt.Sprintf("%s was queued meanwhile (revision %d)", item, rev)
		case s.unsure(tok):
			skip = fmt.Sprintf("a record that may reference it does not decode at revision %d", rev)
		}
		if skip != "" {
			r.rep.Repairs = append(r.rep.Repairs, Repair{Action: "skipped", Resource: res, Detail: skip})
			continue
		}
		err := r.c.store.SetIf(r.ctx, keys.Deleted(), keys.DeletedToken(tok), marker, kv.Absent)
		switch {
		case err == nil:
			r.rep.Repairs = append(r.rep.Repairs, Repair{Action: "queued", Resource: res,
				Detail: fmt.Sprintf("wrote %s for the cleaner; still unreferenced at revision %d", item, rev)})
			r.c.cfg.Logger.Info("fsck: queued an orphaned staging partition for the cleaner", zap.String("token", tok))
		case errors.Is(err, kv.ErrPredicateFailed):
			r.rep.Repairs = append(r.rep.Repairs, Repair{Action: "skipped", Resource: res, Detail: item + " was queued meanwhile"})
		default:
			r.rep.Repairs = append(r.rep.Repairs, Repair{Action: "failed", Resource: res, Detail: err.Error()})
			r.problem("queue %s: %v", res, err)
		}
	}
	return nil
}
