//go:build chaos

package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestLinModels checks the sequential models and the checker's helpers on
// small hand-made histories, legal and not, so that the linearizability
// tests are known to be able to fail, and for the right reasons.
func TestLinModels(t *testing.T) {
	type op = linOp
	get := func(c int, call, ret int64, key, v string) op {
		return op{client: c, call: call, ret: ret, in: kvIn{Op: "get", Key: key}, out: kvOut{Value: v}}
	}
	set := func(c int, call, ret int64, key, v string, r res) op {
		return op{client: c, call: call, ret: ret, in: kvIn{Op: "set", Key: key, Value: v}, out: kvOut{Res: r}}
	}
	setIf := func(c int, call, ret int64, key, v, pred string, r res) op {
		return op{client: c, call: call, ret: ret, in: kvIn{Op: "setif", Key: key, Value: v, Pred: pred}, out: kvOut{Res: r}}
	}
	deleteIf := func(c int, call, ret int64, key, pred string, r res) op {
		return op{client: c, call: call, ret: ret, in: kvIn{Op: "deleteif", Key: key, Pred: pred}, out: kvOut{Res: r}}
	}
	put := func(c int, call, ret int64, key, v string, r res) op {
		return op{client: c, call: call, ret: ret, in: brIn{Op: "put", Key: key, Value: v}, out: brOut{Res: r}}
	}
	bget := func(c int, call, ret int64, key, v string) op {
		return op{client: c, call: call, ret: ret, in: brIn{Op: "get", Key: key}, out: brOut{Value: v}}
	}
	bdel := func(c int, call, ret int64, key string, r res) op {
		return op{client: c, call: call, ret: ret, in: brIn{Op: "delete", Key: key}, out: brOut{Res: r}}
	}
	commit := func(c int, call, ret int64, r res) op {
		return op{client: c, call: call, ret: ret, in: brIn{Op: "commit"}, out: brOut{Res: r}}
	}
	bop := func(name string, c int, call, ret int64, key string, r res) op {
		return op{client: c, call: call, ret: ret, in: brIn{Op: name, Key: key}, out: brOut{Res: r}}
	}
	kvM := newKVModel
	brM := func([]linOp) linModel { return branchModel }
	cases := []struct {
		name  string
		model func([]linOp) linModel
		ops   []op
		legal bool
	}{
		{"kv: compare-and-swap on a fresh read", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), get(1, 20, 30, "k", "a"), setIf(1, 40, 50, "k", "b", "a", resOK), get(0, 60, 70, "k", "b"),
		}, true},
		{"kv: concurrent writes, either order", kvM, []op{
			set(0, 0, 50, "k", "a", resOK), set(1, 10, 40, "k", "b", resOK), get(2, 60, 70, "k", "a"),
		}, true},
		{"kv: open-ended write seen late", kvM, []op{
			set(0, 0, open, "k", "a", resUnknown), get(1, 10, 20, "k", ""), get(1, 30, 40, "k", "a"),
		}, true},
		{"kv: open-ended write never applied", kvM, []op{
			setIf(0, 0, open, "k", "a", "", resUnknown), get(1, 10, 20, "k", ""), set(1, 30, 40, "k", "b", resOK), get(1, 50, 60, "k", "b"),
		}, true},
		{"kv: acknowledged write lost", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), get(1, 20, 30, "k", ""),
		}, false},
		{"kv: open-ended write seen, then unseen", kvM, []op{
			set(0, 0, open, "k", "a", resUnknown), get(1, 10, 20, "k", "a"), get(1, 30, 40, "k", ""),
		}, false},
		{"kv: conditional delete applied on a stale version", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), set(1, 20, 30, "k", "b", resOK), deleteIf(0, 40, 50, "k", "a", resOK),
		}, false},
		{"kv: conditional delete of a version another deletion ended", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), deleteIf(1, 20, 30, "k", "a", resOK), set(1, 40, 50, "k", "b", resOK),
			deleteIf(0, 60, 70, "k", "a", resOK), get(1, 80, 90, "k", "b"),
		}, true},
		{"kv: conditional delete of a missing key", kvM, []op{
			deleteIf(0, 0, 10, "k", "", resOK), set(1, 20, 30, "k", "a", resOK), deleteIf(0, 40, 50, "k", "", resOK),
		}, false},
		{"kv: compare-and-swap reported failed but applied", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), setIf(0, 20, 30, "k", "b", "a", resFailed), get(1, 40, 50, "k", "b"),
		}, false},
		{"kv: keys are independent", kvM, []op{
			set(0, 0, 10, "k", "a", resOK), get(1, 20, 30, "j", ""), get(1, 40, 50, "k", "a"),
		}, true},
		{"branch: commit keeps what is visible", brM, []op{
			put(0, 0, 10, "k", "a", resOK), commit(1, 20, 30, resOK), bget(0, 40, 50, "k", "a"), commit(1, 60, 70, resFailed),
		}, true},
		{"branch: no changes while a put is staged", brM, []op{
			put(0, 0, 10, "k", "a", resOK), commit(1, 20, 30, resFailed),
		}, false},
		{"branch: staged write lost across a commit", brM, []op{
			put(0, 0, 10, "k", "a", resOK), commit(1, 5, 30, resOK), put(0, 15, 20, "k", "b", resOK), bget(2, 40, 50, "k", "a"),
		}, false},
		{"branch: delete of a missing key", brM, []op{
			bdel(0, 0, 10, "k", resFailed), put(0, 20, 30, "k", "a", resOK), bdel(1, 40, 50, "k", resOK), bget(0, 60, 70, "k", ""),
		}, true},
		{"branch: delete says missing while visible", brM, []op{
			put(0, 0, 10, "k", "a", resOK), bdel(1, 20, 30, "k", resFailed),
		}, false},
		{"branch: a batch put lost across a commit", brM, []op{
			put(0, 0, 10, "k", "a", resOK),
			op{client: 1, call: 20, ret: 30, in: brIn{Op: "batchput", Key: "k", Value: "b"}, out: brOut{Res: resOK}},
			commit(2, 40, 50, resOK), bget(0, 60, 70, "k", "a"),
		}, false},
		{"branch: a prefix delete hides the key", brM, []op{
			put(0, 0, 10, "k", "a", resOK), bop("delprefix", 1, 20, 30, "k", resOK), bget(2, 40, 50, "k", "a"),
		}, false},
		{"branch: a commit touches every key", brM, []op{
			put(0, 0, 10, "k", "a", resOK), put(0, 20, 30, "j", "b", resOK), commit(1, 40, 50, resOK),
			bdel(0, 60, 70, "j", resOK), commit(1, 80, 90, resFailed),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			legal := true
			m := c.model(c.ops)
			for _, p := range m.partition(c.ops) {
				if porcupine.CheckOperationsTimeout(m.model, toPorcupine(p), 10*time.Second) != porcupine.Ok {
					legal = false
				}
			}
			if legal != c.legal {
				t.Errorf("linearizable: %v, want %v", legal, c.legal)
			}
		})
	}

	// The reduction of an illegal history keeps the violation and sheds
	// what does not take part in it.
	ops := []op{set(0, 0, 10, "k", "a", resOK)}
	for i := range 20 {
		ops = append(ops, get(1, 20+int64(i)*10, 25+int64(i)*10, "k", "a"))
	}
	ops = append(ops, set(2, 300, 310, "k", "b", resOK), get(3, 320, 330, "k", "a"), get(1, 340, 350, "k", "b"))
	km := newKVModel(ops)
	at, short := km.shortestIllegalPrefix(ops)
	if at != 330 {
		t.Errorf("illegal from %d, want 330 (the stale read's return)", at)
	}
	minimal, _ := km.minimize(short, time.Minute)
	if len(minimal) != 3 || porcupine.CheckOperations(km.model, toPorcupine(minimal)) {
		t.Errorf("reduced to %d operations (legal %v), want the two writes and the stale read:\n%s",
			len(minimal), porcupine.CheckOperations(km.model, toPorcupine(minimal)), listOps(km, minimal, at))
	}
}
