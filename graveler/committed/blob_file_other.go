//go:build !(linux && (amd64 || arm64))

package committed

import (
	"os"
	"path/filepath"
)

// fileWrite writes and fsyncs each object and its directory: without
// syncfs there is no one call that makes a tree's files durable at once.
func fileWrite(p string, data []byte) error {
	if err := fileWriteRenamedSync(p, data); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		// Some systems cannot fsync a directory; the file itself is.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

func fileRead(p string) ([]byte, error) { return os.ReadFile(p) }

// fileSync has nothing left to do for written objects: fileWrite synced
// each. A touched object's new time is not synced on these platforms (the
// service is built for Linux, where syncfs covers it), so a crash right
// after a commit may leave a touched child looking older than it is to a
// collection already under way.
func fileSync(dir string) error { return nil }
