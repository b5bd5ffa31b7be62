//go:build linux

package upload

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// writeSegsAt writes segs one after another at off: one pwritev for
// several segments (repeated after a short write), WriteAt for one.
func writeSegsAt(f *os.File, segs [][]byte, off int64) error {
	if len(segs) == 1 {
		_, err := f.WriteAt(segs[0], off)
		return err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	iov := append([][]byte(nil), segs...) // advanced below; segs stay whole
	var werr error
	if err := rc.Control(func(fd uintptr) {
		for len(iov) > 0 {
			n, err := unix.Pwritev(int(fd), iov, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = err
				return
			}
			if n == 0 {
				werr = io.ErrShortWrite
				return
			}
			off += int64(n)
			for n > 0 {
				if k := len(iov[0]); n >= k {
					iov, n = iov[1:], n-k
				} else {
					iov[0], n = iov[0][n:], 0
				}
			}
			for len(iov) > 0 && len(iov[0]) == 0 {
				iov = iov[1:]
			}
		}
	}); err != nil {
		return err
	}
	return werr
}
