package upload

import (
	"os"
	"syscall"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to
// disk now (sync_file_range SYNC_FILE_RANGE_WRITE), without waiting for it
// and without any durability promise: the fsync that makes the bytes
// durable (Sync, the commit) then finds most of them written already,
// instead of flushing the whole upload at the end. Errors are ignored; the
// fsync reports what matters.
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		const syncFileRangeWrite = 0x2 // SYNC_FILE_RANGE_WRITE
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	})
}
