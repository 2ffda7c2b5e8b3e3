package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"graveler/buildinfo"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestPprofOnlyWhenEnabled: the metrics listener serves the profiler only
// with EnablePprof, and /metrics (with the build's version) either way.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		srv := httptest.NewServer(metricsHandler(enabled))
		code, _ := get(t, srv.URL+"/debug/pprof/")
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[enabled]; code != want {
			t.Errorf("pprof enabled %v: /debug/pprof/ answers %d, want %d", enabled, code, want)
		}
		if code, _ := get(t, srv.URL+"/debug/pprof/cmdline"); enabled != (code == http.StatusOK) {
			t.Errorf("pprof enabled %v: /debug/pprof/cmdline answers %d", enabled, code)
		}
		code, body := get(t, srv.URL+"/metrics")
		if code != http.StatusOK || !strings.Contains(body, `graveler_build_info{goversion="`) || !strings.Contains(body, `version="`+buildinfo.Version+`"} 1`) {
			t.Errorf("/metrics: %d, build info missing", code)
		}
		srv.Close()
	}
}
