//go:build !(linux && (amd64 || arm64))

package committed

import "os"

func fileWrite(p string, data []byte) error { return fileWriteRenamed(p, data) }

func fileRead(p string) ([]byte, error) { return os.ReadFile(p) }
