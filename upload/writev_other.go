//go:build !linux

package upload

import "os"

// writeSegsAt writes segs one after another at off.
func writeSegsAt(f *os.File, segs [][]byte, off int64) error {
	for _, b := range segs {
		if _, err := f.WriteAt(b, off); err != nil {
			return err
		}
		off += int64(len(b))
	}
	return nil
}
