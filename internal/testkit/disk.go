package testkit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of size bytes on a new folder and unmounts it at
// the end of the test. It skips the test, loudly, where mounting is not
// permitted (not root, or a container without CAP_SYS_ADMIN): the caller
// names the unprivileged test that covers the same logic in why.
func Tmpfs(t testing.TB, size int64, why string) string {
	t.Helper()
	dir := t.TempDir()
	MountTmpfs(t, dir, size, why)
	return dir
}

// MountTmpfs is Tmpfs on the existing folder dir.
func MountTmpfs(t testing.TB, dir string, size int64, why string) {
	t.Helper()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("*** SKIPPED: this test mounts a tmpfs (root with CAP_SYS_ADMIN): %v: %s; %s ***", err, strings.TrimSpace(string(out)), why)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
}

// Fill writes a file in dir until at most free bytes are left on its
// volume (until the volume is full when free is 0), and returns a function
// that removes the file.
func Fill(t testing.TB, dir string, free int64) (remove func()) {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 256<<10)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		left := int64(st.Bavail) * int64(st.Bsize)
		if left <= free {
			break
		}
		n := min(int64(len(chunk)), left-free)
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
}
