package hostport

import "testing"

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		addr string
		min  int
		host string
		port int
	}{
		{"127.0.0.1:0", 0, "127.0.0.1", 0},
		{":7070", 0, "", 7070},
		{"[::1]:7070", 0, "::1", 7070},
		{"localhost:65535", 1, "localhost", 65535},
		{"etcd-0.etcd:02379", 1, "etcd-0.etcd", 2379},
	} {
		host, port, err := Split(tc.addr, tc.min)
		if err != nil || host != tc.host || port != tc.port {
			t.Errorf("Split(%q, %d) = %q, %d, %v", tc.addr, tc.min, host, port, err)
		}
	}
	for _, tc := range []struct {
		addr string
		min  int
	}{
		{"127.0.0.1:70000", 0}, {":-1", 0}, {":+80", 0}, {"127.0.0.1:http", 0}, {"127.0.0.1:", 0},
		{"127.0.0.1", 0}, {"::1:7070", 0}, {":0", 1}, {":0000080000", 0}, {":99999999999999999999", 0},
	} {
		if host, port, err := Split(tc.addr, tc.min); err == nil {
			t.Errorf("Split(%q, %d) = %q, %d: accepted", tc.addr, tc.min, host, port)
		}
	}
}
