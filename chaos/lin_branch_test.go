//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

// brIn is one call on a branch: put (alone or as a one-entry batch), get,
// delete, reset or delete by prefix of a key (values unique per put), or
// commit (no key: it belongs to every key's history).
type brIn struct {
	Op    string
	Key   string
	Value string
}

func (in brIn) read() bool { return in.Op == "get" }

// brOut is its outcome; Value is what a get returned ("" when not found).
type brOut struct {
	Value string
	Res   res
}

// brState is one key of a branch: the value its readers see (staged over
// committed) and the value in its head commit.
type brState struct{ Vis, Com string }

// branchModel is one key of a branch. A commit is placed where it seals
// the branch's staged entries (a commit's content is what was visible
// then): it succeeds with anything, and fails with NO_CHANGES only if
// nothing differs from the head, which for this key means Vis == Com.
// Committed values are not read back: the head moves when the commit
// ends, not when it seals, so a read of the head is not atomic with a
// commit in this model. As in kvModel, an open-ended operation is
// applied wherever it is placed.
var branchModel = linModel{
	model: porcupine.Model{
		Init: func() any { return brState{} },
		Step: func(state, input, output any) (bool, any) {
			st, in, out := state.(brState), input.(brIn), output.(brOut)
			switch in.Op {
			case "get":
				return out.Value == st.Vis, st
			case "put", "batchput":
				st.Vis = in.Value
				return true, st
			case "delprefix":
				// A range tombstone over the key: no read, always ok.
				st.Vis = ""
				return true, st
			case "reset":
				// Discards what is staged: the key shows its head again.
				// A commit in flight that the reset overlaps is placed
				// after it, where it seals what the reset left.
				st.Vis = st.Com
				return true, st
			case "delete":
				// Delete reads the key and then stages a tombstone: a
				// NOT_FOUND answer comes from the read; a success may
				// follow a concurrent delete, so it is not checked.
				if out.Res == resFailed {
					return st.Vis == "", st
				}
				st.Vis = ""
				return true, st
			case "commit":
				if out.Res == resFailed {
					return st.Vis == st.Com, st
				}
				st.Com = st.Vis
				return true, st
			}
			panic("branch model: unknown operation " + in.Op)
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(brIn), output.(brOut)
			switch in.Op {
			case "get":
				return fmt.Sprintf("get(%s) -> %s", in.Key, orAbsent(out.Value))
			case "put", "batchput":
				return fmt.Sprintf("%s(%s, %s) -> %s", in.Op, in.Key, in.Value, out.Res)
			case "delete", "delprefix", "reset":
				return fmt.Sprintf("%s(%s) -> %s", in.Op, in.Key, out.Res)
			default:
				return fmt.Sprintf("commit -> %s", out.Res)
			}
		},
		DescribeState: func(state any) string {
			st := state.(brState)
			return fmt.Sprintf("visible %s, committed %s", orAbsent(st.Vis), orAbsent(st.Com))
		},
	},
	key: func(in any) (string, bool) {
		b := in.(brIn)
		return b.Key, b.Op == "commit"
	},
	pending: func(op linOp) (linOp, bool) {
		if op.in.(brIn).Op == "get" {
			return op, false
		}
		op.ret, op.out = open, brOut{Res: resUnknown}
		return op, true
	},
}

// brClient runs random branch operations through one gravelerd.
type brClient struct {
	id     int
	c      *client.Client
	h      *history
	rng    *rand.Rand
	seq    int
	repo   string
	counts map[string]int
}

func (c *brClient) outcomes() map[string]int { return c.counts }

func (c *brClient) timeout() time.Duration {
	return time.Duration(1000+c.rng.IntN(4000)) * time.Millisecond
}

// backoff after a failed call, as a real client would, so that a
// restarting gravelerd's fast failures do not flood the history.
func (c *brClient) backoff(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(50+c.rng.IntN(100)) * time.Millisecond):
	}
}

func (c *brClient) run(ctx context.Context, keys []string, p *pacer) {
	branch := client.Branch(c.repo, "main")
	// A key that prefixes another cannot be deleted by prefix alone.
	alone := func(key string) bool {
		for _, k := range keys {
			if k != key && strings.HasPrefix(k, key) {
				return false
			}
		}
		return true
	}
	for p.next(ctx) {
		key := keys[c.rng.IntN(len(keys))]
		c.seq++
		val := fmt.Sprintf("c%d-%d", c.id, c.seq)
		op := c.rng.IntN(100)
		call := c.h.now()
		cctx, cancel := context.WithTimeout(ctx, c.timeout())
		var in brIn
		var out brOut
		var err error
		entry := &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte(val), Data: []byte(val)}}
		switch {
		case op < 27:
			in = brIn{Op: "put", Key: key, Value: val}
			_, err = c.c.PutEntry(cctx, &pb.PutEntryRequest{Branch: branch, Entry: entry})
		case op < 35:
			// A batch's fence is read apart from its write.
			in = brIn{Op: "batchput", Key: key, Value: val}
			_, err = c.c.BatchPutEntries(cctx, &pb.BatchPutEntriesRequest{Branch: branch, Entries: []*pb.Entry{entry}})
		case op < 70:
			in = brIn{Op: "get", Key: key}
			var resp *pb.GetEntryResponse
			resp, err = c.c.GetEntry(cctx, &pb.GetEntryRequest{Repository: client.Repository(c.repo), Ref: "main", Key: []byte(key)})
			out.Value = string(resp.GetEntry().GetValue().GetIdentity())
		case op < 80:
			in = brIn{Op: "delete", Key: key}
			_, err = c.c.DeleteEntry(cctx, &pb.DeleteEntryRequest{Branch: branch, Key: []byte(key)})
		case op < 85 && alone(key):
			in = brIn{Op: "delprefix", Key: key}
			_, err = c.c.DeletePrefix(cctx, &pb.DeletePrefixRequest{Branch: branch, Prefix: []byte(key)})
		case op < 90:
			// Of a key alone, a prefix reset is a reset of the key taken
			// by the other path (one reset range).
			in = brIn{Op: "reset", Key: key}
			scope := pb.ResetScope_RESET_SCOPE_KEY
			if alone(key) && c.rng.IntN(2) == 0 {
				scope = pb.ResetScope_RESET_SCOPE_PREFIX
			}
			_, err = c.c.Reset(cctx, &pb.ResetRequest{Branch: branch, Scope: scope, Key: []byte(key)})
		default:
			in = brIn{Op: "commit"}
			_, err = c.c.Commit(cctx, &pb.CommitRequest{Branch: branch, Options: &pb.CommitOptions{Message: fmt.Sprintf("lin c%d-%d", c.id, c.seq), Committer: "lin"}})
		}
		cancel()
		if ctx.Err() != nil && err != nil {
			// Cut short by the end of the run: a write stays open-ended,
			// as any unknown outcome.
			if in.Op != "get" {
				c.h.add(c.id, call, in, brOut{Res: resUnknown}, true)
			}
			return
		}
		switch {
		case err == nil:
			out.Res = resOK
		case in.Op == "get" && code(err) == codes.NotFound && client.Reason(err) == "ENTRY_NOT_FOUND":
			out.Res, out.Value = resOK, ""
		case in.Op == "delete" && code(err) == codes.NotFound && client.Reason(err) == "ENTRY_NOT_FOUND":
			out.Res = resFailed
		case in.Op == "commit" && code(err) == codes.FailedPrecondition && client.Reason(err) == "NO_CHANGES":
			out.Res = resFailed
		case in.Op == "get":
			c.h.drop()
			c.counts["get dropped "+code(err).String()]++
			c.backoff(ctx)
			continue
		default:
			out.Res = resUnknown
		}
		c.h.add(c.id, call, in, out, out.Res == resUnknown)
		if out.Res == resUnknown {
			c.counts[in.Op+" unknown "+code(err).String()]++
			c.backoff(ctx)
		} else {
			c.counts[in.Op+" "+out.Res.String()]++
		}
	}
}

// TestLinearizableBranch records staged puts, gets, deletes and commits on
// one branch, made over gRPC through two gravelerd replicas sharing a
// three-process etcd cluster, while etcd members are paused and killed
// and a gravelerd is restarted, and checks with porcupine that the history
// is linearizable against a sequential branch, key by key (every commit
// is in every key's history).
func TestLinearizableBranch(t *testing.T) {
	s := linSeed()
	t.Logf("lin-branch: duration %s, %d operations at most, %d clients, %d keys, seed %d", *linDuration, *linOps, *linClients, *linKeys, s)
	rng := rand.New(rand.NewPCG(s, 0))
	c := startCluster(t, 3)
	gs, conns := startGravelerds(t, c, zap.NewNop())
	const repo = "lin"
	ensureRepository(t, conns[0], repo)
	runLin(t, "lin-branch", s, rng, c, gs, func(i int, h *history, rng *rand.Rand) linClient {
		return &brClient{id: i, c: conns[i%len(conns)], h: h, rng: rng, repo: repo, counts: map[string]int{}}
	}, func([]linOp) linModel { return branchModel })
}
