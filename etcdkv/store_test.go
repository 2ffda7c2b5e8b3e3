package etcdkv_test

import (
	"fmt"

	"graveler/etcdkv"
	"testing"

	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
	"graveler/kv/kvtest"
)

func TestConformance(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	n := 0
	kvtest.Run(t, func(t testing.TB) kv.Store {
		// One server for the suite; each case gets its own root prefix.
		n++
		return etcdkvtest.NewStoreOn(t, srv, etcdkvConfig(n))
	})
}

func etcdkvConfig(n int) etcdkv.Config {
	return etcdkv.Config{Prefix: fmt.Sprintf("/conformance-%d", n)}
}
