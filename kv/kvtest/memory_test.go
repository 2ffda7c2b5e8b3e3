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
