package gravelertest

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"

	"graveler/graveler/ref/refpb"
	"graveler/keys"
	"graveler/kv"
)

// MarkDeleting leaves repository id in store as a delete that stopped
// after its first step: the record marked deleting, still in place.
func MarkDeleting(t testing.TB, store kv.Store, id string) {
	t.Helper()
	ctx := context.Background()
	data, _, err := store.Get(ctx, keys.Graveler(), keys.Repository(id))
	if err != nil {
		t.Fatal(err)
	}
	var rec refpb.Repository
	if err := proto.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.State = refpb.RepositoryState_REPOSITORY_STATE_DELETING
	if data, err = proto.Marshal(&rec); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, keys.Graveler(), keys.Repository(id), data); err != nil {
		t.Fatal(err)
	}
}
