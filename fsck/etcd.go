package fsck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errStop: a scan's callback has seen what it needed.
var errStop = errors.New("fsck: stop scan")

// errNoStream: the server has no RangeStream (etcd before 3.7, a proxy).
var errNoStream = errors.New("fsck: RangeStream unimplemented")

// reach waits until etcd answers a read, for at most ConnectTimeout. The
// client would otherwise wait for a connection as long as each request's
// context lasts and then report only the deadline: here each attempt fails
// as soon as no connection can be made, with gRPC's reason (connection
// refused, TLS handshake), which is what the operator reads.
func (r *run) reach() error {
	ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.ConnectTimeout)
	defer cancel()
	kvc := etcdserverpb.NewKVClient(r.c.cli.ActiveConnection())
	var last error
	for {
		_, err := kvc.Range(ctx, &etcdserverpb.RangeRequest{Key: []byte(r.c.store.Prefix() + "/"), CountOnly: true}, grpc.WaitForReady(false))
		switch {
		case err == nil:
			return nil
		case r.ctx.Err() != nil:
			return fmt.Errorf("%w: %w", ErrIncomplete, r.ctx.Err())
		case ctx.Err() == nil && status.Code(err) != codes.Unavailable:
			// etcd answered: authentication, permission, ...
			return fmt.Errorf("%w: %v", ErrUnreachable, err)
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			msg := status.Convert(last).Message()
			if strings.Contains(msg, "handshake") {
				msg += " (a TLS mismatch? an https:// endpoint or a CA/client certificate need TLS on the server, an http:// endpoint talks plaintext)"
			}
			return fmt.Errorf("%w: no answer within the connect timeout %v: %s", ErrUnreachable, r.c.cfg.ConnectTimeout, msg)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// currentRevision returns etcd's revision now.
func (r *run) currentRevision() (int64, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.RequestTimeout)
	defer cancel()
	resp, err := r.c.cli.Get(ctx, r.c.store.Prefix()+"/", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("%w: read etcd's revision: %v", ErrIncomplete, err)
	}
	return resp.Header.Revision, nil
}

// readErr describes a failed read at rev.
func readErr(what string, rev int64, err error) error {
	if err == nil || errors.Is(err, errStop) {
		return nil
	}
	if errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted) {
		return fmt.Errorf("%w: %s at revision %d: etcd compacted that revision during the check (its compaction retention is shorter than the check took): run it again", ErrIncomplete, what, rev)
	}
	return fmt.Errorf("%w: %s at revision %d: %v", ErrIncomplete, what, rev, err)
}

// scanPrefix calls fn for every key under prefix at rev, in key order.
func (r *run) scanPrefix(what string, rev int64, prefix string, keysOnly bool, fn func(*mvccpb.KeyValue) error) error {
	return r.scan(what, rev, prefix, clientv3.GetPrefixRangeEnd(prefix), keysOnly, fn)
}

// scan calls fn for every key in [from, end) at rev, in key order, until
// fn returns an error (errStop ends it without one). It streams the range
// (RangeStream), whose cost is that of the keys read; a paged Range would
// count every remaining key of the range with each page, quadratic over
// a partition of millions of staged keys. Servers without RangeStream
// get pages.
func (r *run) scan(what string, rev int64, from, end string, keysOnly bool, fn func(*mvccpb.KeyValue) error) error {
	if !r.c.noStream.Load() {
		err := r.scanStream(rev, from, end, keysOnly, fn)
		if !errors.Is(err, errNoStream) {
			return readErr(what, rev, err)
		}
		r.c.noStream.Store(true)
	}
	return readErr(what, rev, r.scanPaged(rev, from, end, keysOnly, fn))
}

func (r *run) scanStream(rev int64, from, end string, keysOnly bool, fn func(*mvccpb.KeyValue) error) error {
	ctx, cancel := context.WithCancel(r.ctx)
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithRev(rev)}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	// The opening is bounded like each chunk: the client waits for a
	// ready connection as long as the stream's context lasts, so an etcd
	// that stopped after the revision was read would hold the check until
	// its own timeout.
	opening := time.AfterFunc(r.c.cfg.RequestTimeout, cancel)
	ch, err := r.c.cli.GetStream(ctx, from, opts...)
	opened := opening.Stop()
	if err != nil {
		cancel()
		if !opened && r.ctx.Err() == nil {
			return fmt.Errorf("no answer for %v", r.c.cfg.RequestTimeout)
		}
		if status.Code(err) == codes.Unimplemented {
			return errNoStream
		}
		return err
	}
	// The client's goroutine blocks sending to ch until it is read:
	// drain it after cancelling, or it leaks.
	defer func() {
		cancel()
		for range ch {
		}
	}()
	if !opened {
		return fmt.Errorf("no answer for %v", r.c.cfg.RequestTimeout)
	}
	timer := time.NewTimer(r.c.cfg.RequestTimeout)
	defer timer.Stop()
	got := false
	for {
		var resp clientv3.RangeStreamResponse
		var ok bool
		select {
		case resp, ok = <-ch:
		case <-timer.C:
			return fmt.Errorf("no answer for %v", r.c.cfg.RequestTimeout)
		}
		if !ok {
			return nil
		}
		if err := resp.Err(); err != nil {
			if status.Code(err) == codes.Unimplemented && !got {
				return errNoStream
			}
			return err
		}
		for _, e := range resp.Kvs {
			got = true
			if err := fn(e); err != nil {
				return err
			}
		}
		timer.Reset(r.c.cfg.RequestTimeout)
	}
}

func (r *run) scanPaged(rev int64, from, end string, keysOnly bool, fn func(*mvccpb.KeyValue) error) error {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(int64(r.c.cfg.PageSize))}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.RequestTimeout)
		resp, err := r.c.cli.Get(ctx, from, opts...)
		cancel()
		if err != nil {
			return err
		}
		for _, e := range resp.Kvs {
			if err := fn(e); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// hasKeys reports whether prefix holds a key at rev.
func (r *run) hasKeys(what string, rev int64, prefix string) (bool, error) {
	found := false
	err := r.scanPrefix(what, rev, prefix, true, func(*mvccpb.KeyValue) error {
		found = true
		return errStop
	})
	return found, err
}

// checkEtcd checks the cluster: alarms, each member's database size
// against the quota, and the members' hashes of the key space at rev.
func (r *run) checkEtcd(rev int64) {
	rep := &r.rep.Etcd
	rep.QuotaBytes = r.c.cfg.EtcdQuotaBytes
	ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.RequestTimeout)
	defer cancel()
	alarms, err := r.c.cli.AlarmList(ctx)
	if err != nil {
		r.problem("list etcd alarms: %v", err)
	} else {
		for _, a := range alarms.Alarms {
			name := a.Alarm.String()
			rep.Alarms = append(rep.Alarms, fmt.Sprintf("%s on member %x", name, a.MemberID))
			r.find(KindEtcdAlarm, "", fmt.Sprintf("etcd member %x", a.MemberID), "alarm %s is raised", name)
		}
	}
	members, err := r.c.cli.MemberList(ctx)
	if err != nil {
		r.problem("list etcd members: %v", err)
		return
	}
	for _, m := range members.Members {
		mem := Member{ID: strconv.FormatUint(m.ID, 16), Name: m.Name}
		if len(m.ClientURLs) == 0 {
			mem.Error = "no client URL (a member added but never started)"
			r.find(KindEtcdMemberUnreachable, "", memberName(mem), "%s", mem.Error)
			rep.Members = append(rep.Members, mem)
			continue
		}
		mem.Endpoint = m.ClientURLs[0]
		r.checkMember(&mem, rev)
		rep.Members = append(rep.Members, mem)
	}
	if !r.c.cfg.SkipEtcdHash {
		compared, mismatch := compareHashes(rep.Members)
		rep.HashesCompared = compared
		if mismatch != "" {
			r.find(KindEtcdHashMismatch, "", "etcd members", "hashes of the key space at revision %d differ: %s", rev, mismatch)
		}
	}
}

func memberName(m Member) string {
	if m.Name != "" {
		return "etcd member " + m.Name + " (" + m.ID + ")"
	}
	return "etcd member " + m.ID
}

// checkMember reads one member's status and hash.
func (r *run) checkMember(m *Member, rev int64) {
	ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.RequestTimeout)
	defer cancel()
	st, err := r.c.cli.Status(ctx, m.Endpoint)
	if err != nil {
		m.Error = err.Error()
		r.find(KindEtcdMemberUnreachable, "", memberName(*m), "status from %s: %v", m.Endpoint, err)
		return
	}
	m.DBSize, m.DBSizeInUse = st.DbSize, st.DbSizeInUse
	quota := r.c.cfg.EtcdQuotaBytes
	if float64(st.DbSize) > DBSizeWarnFraction*float64(quota) {
		r.find(KindEtcdDBSize, "", memberName(*m), "database is %d bytes (%d in use), %.0f%% of the %d-byte quota",
			st.DbSize, st.DbSizeInUse, 100*float64(st.DbSize)/float64(quota), quota)
	}
	if r.c.cfg.SkipEtcdHash {
		return
	}
	// A member that has not applied rev yet answers "future revision":
	// give it a moment to catch up.
	for attempt := 0; ; attempt++ {
		h, err := r.c.cli.HashKV(ctx, m.Endpoint, rev)
		if err == nil {
			m.Hash, m.CompactRevision = h.Hash, h.CompactRevision
			return
		}
		if (errors.Is(err, rpctypes.ErrFutureRev) || errors.Is(err, rpctypes.ErrGRPCFutureRev)) && attempt < 20 && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		m.Error = err.Error()
		r.find(KindEtcdMemberUnreachable, "", memberName(*m), "hash at revision %d from %s: %v", rev, m.Endpoint, err)
		return
	}
}

// compareHashes compares the hashes of members that hashed the same
// history (the same compaction revision: a hash covers the revisions
// after it) and returns how many were compared and, if they disagree, a
// description of who said what.
func compareHashes(members []Member) (compared int, mismatch string) {
	byCompact := map[int64][]Member{}
	for _, m := range members {
		if m.Error == "" {
			byCompact[m.CompactRevision] = append(byCompact[m.CompactRevision], m)
		}
	}
	var diffs []string
	for _, compact := range slices.Sorted(maps.Keys(byCompact)) {
		group := byCompact[compact]
		if len(group) < 2 {
			continue
		}
		compared += len(group)
		agree := true
		for _, m := range group[1:] {
			if m.Hash != group[0].Hash {
				agree = false
			}
		}
		if !agree {
			var parts []string
			for _, m := range group {
				parts = append(parts, fmt.Sprintf("%s=%08x", memberName(m)[len("etcd member "):], m.Hash))
			}
			diffs = append(diffs, fmt.Sprintf("compacted at %d: %s", compact, strings.Join(parts, ", ")))
		}
	}
	return compared, strings.Join(diffs, "; ")
}
