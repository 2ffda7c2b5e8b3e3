package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadTokensEmptyFileSaysWhatToFill: a tokens file with no token is
// refused with a message that names the file and says what it must hold,
// wherever it comes from, and only as a hint, "if it is mounted from a
// Kubernetes Secret", the Secret key it is and the Secret of deploy/k8s.
func TestLoadTokensEmptyFileSaysWhatToFill(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tokens")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens")
	for _, content := range []string{"", "\n\n", "# <token> <label>, one per line\n   \n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadTokens(path)
		if err == nil {
			t.Fatalf("LoadTokens(%q) accepted a file with no token", content)
		}
		for _, want := range []string{path + " holds no token", "it must hold one token per line, \"<token> <label>\"",
			`if it is mounted from a Kubernetes Secret, fill the Secret's key "tokens"`, "Secret graveler-tokens", "secrets/tokens"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("LoadTokens(%q): %q does not say %q", content, err, want)
			}
		}
		// Outside a cluster the file is no Secret: the message must not
		// say it is one.
		if msg, _, _ := strings.Cut(err.Error(), "if it is mounted"); strings.Contains(msg, "Secret") || strings.Contains(msg, "mounted at") {
			t.Errorf("LoadTokens(%q): %q speaks of a Secret before the hint", content, err)
		}
	}
	if err := os.WriteFile(path, []byte("# ops\ns3cret alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if label, ok := tok.Lookup("s3cret"); !ok || label != "alice" {
		t.Errorf("Lookup(s3cret) = %q, %v; want alice", label, ok)
	}
}
