//go:build !(linux && (amd64 || arm64))

package committed

import (
	"io/fs"
	"os"
	"path/filepath"
)

// fileWrite writes each object with an fsync before its rename (see
// renameNoReplace) and an fsync of its directory: without syncfs there is
// no one call that makes a tree's files durable at once.
func fileWrite(p string, data []byte) error {
	if err := fileWriteRenamed(p, data); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(p)); err == nil {
		// Some systems cannot fsync a directory; the file itself is.
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// renameNoReplace reports every target as existing, so that
// fileWriteRenamed fsyncs every object before its rename.
func renameNoReplace(tmp, p string) error { return fs.ErrExist }

func fileRead(p string) ([]byte, error) { return os.ReadFile(p) }

// newFileSyncer has nothing left to sync for written objects: fileWrite
// synced each. A touched object's new time is not synced on these
// platforms (the service is built for Linux, where syncfs covers it), so
// a crash right after a commit may leave a touched child looking older
// than it is to a collection already under way.
func newFileSyncer(dir string) (Syncer, error) { return noSync{}, nil }
