package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// loadLinks reads the links file written by saveLinks: a JSON object of
// short key → long URL. A missing file is an empty one (the first run); a
// file that does not parse, or holds a key or URL /shorten would not have
// made, is an error naming it rather than a demo that silently lost them.
func loadLinks(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("links file: %w", err)
	}
	var links map[string]string
	if err := json.Unmarshal(data, &links); err != nil {
		return nil, fmt.Errorf("links file %s: not a JSON object of short key to URL: %w", path, err)
	}
	for k, v := range links {
		if !validKey(k) {
			return nil, fmt.Errorf("links file %s: key %q is not %d letters or digits", path, k, keyLen)
		}
		if _, err := checkURL(v); err != nil {
			return nil, fmt.Errorf("links file %s: key %q: %w", path, k, err)
		}
	}
	return links, nil
}

// validKey says whether k is a key add makes.
func validKey(k string) bool {
	if len(k) != keyLen {
		return false
	}
	for _, c := range []byte(k) {
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// saveLinks replaces the file at path with links, atomically: it writes a
// temporary file beside it, syncs it and renames it over the old one, so
// that a crash or a full disk leaves either the old file or the new one,
// never half of one. The folder is created when missing.
func saveLinks(path string, links map[string]string) (err error) {
	data, err := json.MarshalIndent(links, "", "  ") // sorted keys: diffable
	if err != nil {
		return fmt.Errorf("links file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("links file: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("links file: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("links file: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("links file: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("links file: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("links file: %w", err)
	}
	// The rename is durable once the folder's entry is synced.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
