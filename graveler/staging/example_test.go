package staging_test

import (
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/kv"
)

func Example() {
	ctx := context.Background()
	store := kv.NewMemoryStore()
	defer store.Close()
	m := staging.New(store, staging.Config{})
	const token graveler.StagingToken = "example.01jz"

	_ = m.Set(ctx, token, graveler.Key("b/two"), &graveler.Value{Identity: []byte("id2"), Data: []byte("2")})
	_ = m.SetBatch(ctx, token, []*graveler.ValueRecord{
		{Key: graveler.Key("a/one"), Value: &graveler.Value{Identity: []byte("id1"), Data: []byte("1")}},
		{Key: graveler.Key("c/gone")}, // nil Value: a tombstone
	})

	if v, err := m.Get(ctx, token, graveler.Key("c/gone")); err == nil && v == nil {
		fmt.Println("c/gone is staged as deleted")
	}
	if _, err := m.Get(ctx, token, graveler.Key("d")); errors.Is(err, graveler.ErrEntryNotFound) {
		fmt.Println("nothing staged for d")
	}

	it, err := m.List(ctx, token)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer it.Close()
	it.SeekGE(graveler.Key("b"))
	for it.Next() {
		r := it.Value()
		if r.IsTombstone() {
			fmt.Printf("%s: tombstone\n", r.Key)
		} else {
			fmt.Printf("%s: %s\n", r.Key, r.Data)
		}
	}
	if err := it.Err(); err != nil {
		fmt.Println(err)
	}

	_ = m.DropByPrefix(ctx, token, graveler.Key("a/"))
	_, err = m.Get(ctx, token, graveler.Key("a/one"))
	fmt.Println(errors.Is(err, graveler.ErrNotFound))
	// Output:
	// c/gone is staged as deleted
	// nothing staged for d
	// b/two: 2
	// c/gone: tombstone
	// true
}
