package kvtest_test

import (
	"testing"

	"graveler/kv"
	"graveler/kv/kvtest"
)

func TestMemoryStore(t *testing.T) {
	kvtest.Run(t, func(testing.TB) kv.Store { return kv.NewMemoryStore() })
}

func TestFaultStorePassesThrough(t *testing.T) {
	kvtest.Run(t, func(testing.TB) kv.Store { return kvtest.NewFaultStore(kv.NewMemoryStore()) })
}

// TestStoreWithoutOptionalAbilities runs the suite on a store that has
// only the Store methods, so the fallbacks of kv.SetAndRead and
// kv.DropPartition are checked too.
func TestStoreWithoutOptionalAbilities(t *testing.T) {
	kvtest.Run(t, func(testing.TB) kv.Store { return struct{ kv.Store }{kv.NewMemoryStore()} })
}
