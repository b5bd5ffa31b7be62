package fs

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// copyRangeStep is the most one copy_file_range call copies, so a
// cancelled context stops a large copy within a step.
const copyRangeStep = 4 << 20

// copyRange appends n bytes of src from off to dst inside the kernel
// (copy_file_range): the bytes never pass through this process's memory,
// and src's file offset is left alone. handled is false, with nothing
// copied, when the kernel cannot copy between the two files (another
// filesystem type, an old kernel); the caller then copies them itself.
func copyRange(ctx context.Context, dst, src *os.File, off, n int64) (copied int64, handled bool, err error) {
	sc, err := src.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	dc, err := dst.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	for copied < n {
		if err := ctx.Err(); err != nil {
			return copied, true, err
		}
		var k int
		var cerr error
		ctlErr := sc.Control(func(sfd uintptr) {
			if err := dc.Control(func(dfd uintptr) {
				k, cerr = unix.CopyFileRange(int(sfd), &off, int(dfd), nil, int(min(n-copied, copyRangeStep)), 0)
			}); err != nil {
				cerr = err
			}
		})
		if cerr == nil {
			cerr = ctlErr
		}
		if cerr != nil {
			if copied == 0 && (errors.Is(cerr, unix.EXDEV) || errors.Is(cerr, unix.ENOSYS) ||
				errors.Is(cerr, unix.EOPNOTSUPP) || errors.Is(cerr, unix.EINVAL) || errors.Is(cerr, unix.EBADF)) {
				return 0, false, nil
			}
			return copied, true, cerr
		}
		if k == 0 {
			return copied, true, errShortSource
		}
		copied += int64(k)
	}
	return copied, true, nil
}
