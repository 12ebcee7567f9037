package analytics

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// A spill file holds counts as JSON, named spill-<unix nanoseconds>-<seq>.json
// so that names sort oldest first. It is written to a temporary name, synced
// and renamed, so a file with the final name is always whole; a crash while
// spilling leaves a *.tmp that is ignored (its counts were in memory only).
const (
	spillPrefix = "spill-"
	spillSuffix = ".json"
)

var spillSeq atomic.Uint64

// DefaultSpillPath returns where a Flusher for cfg keeps its spill files: a
// directory "analytics-spill" beside the embedded store's directory (by
// default ./data/analytics-spill), whichever store is used. It is never
// inside the store's own directory.
func DefaultSpillPath(cfg Config) string {
	base := cfg.Embedded.Path
	if base == "" {
		base = DefaultConfig().Embedded.Path
	}
	return filepath.Join(filepath.Dir(filepath.Clean(base)), "analytics-spill")
}

type spillFile struct {
	path    string
	entries int // counts in it, for the metric; -1 when unknown
}

// spillData is the file's content: counts in the tier they were counted
// in, the finest. What the flush that writes them back adds (where each
// goes, Active entries, marks) depends on when that is, so it is not kept.
// Files of earlier versions hold every count once per tier, and totals;
// readSpill keeps their finest counts only, which hold all the visits.
type spillData struct {
	Counts []Count        `json:"counts"`
	Totals []spilledTotal `json:"totals,omitempty"` // earlier versions only: ignored
}

type spilledTotal struct {
	Key string `json:"Key"`
}

func writeSpill(dir string, counts []Count) (spillFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return spillFile{}, fmt.Errorf("analytics: spill: %w", err)
	}
	name := fmt.Sprintf("%s%020d-%06d%s", spillPrefix, time.Now().UnixNano(), spillSeq.Add(1)%1_000_000, spillSuffix)
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, name+".*.tmp")
	if err != nil {
		return spillFile{}, fmt.Errorf("analytics: spill: %w", err)
	}
	err = json.NewEncoder(tmp).Encode(spillData{Counts: counts})
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return spillFile{}, fmt.Errorf("analytics: spill: %w", err)
	}
	syncDir(dir)
	return spillFile{path: path, entries: len(counts)}, nil
}

// syncDir makes a rename or removal in dir durable, where the system can.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

func readSpill(path string) ([]Count, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("analytics: spill: %w", err)
	}
	var d spillData
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("analytics: spill: %s: %w", filepath.Base(path), err)
	}
	for _, c := range d.Counts {
		if c.Key == "" || c.Step <= 0 || c.Start.IsZero() {
			return nil, fmt.Errorf("analytics: spill: %s: bad count %+v", filepath.Base(path), c)
		}
	}
	if len(d.Totals) > 0 && len(d.Counts) > 0 {
		// An earlier version's file: every visit once per tier. Its
		// finest tier has them all.
		finest := d.Counts[0].Step
		for _, c := range d.Counts {
			finest = min(finest, c.Step)
		}
		d.Counts = slices.DeleteFunc(d.Counts, func(c Count) bool { return c.Step != finest })
	}
	return d.Counts, nil
}

func removeSpill(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("analytics: spill: %w", err)
	}
	syncDir(filepath.Dir(path))
	return nil
}

// setAside renames an unreadable spill file so that it is not read again.
func setAside(path string) {
	os.Rename(path, path+".bad")
}

// findSpills lists the spill files in dir, oldest first, counting their
// entries. A missing dir has none.
func findSpills(dir string) ([]spillFile, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("analytics: spill: %w", err)
	}
	var files []spillFile
	for _, de := range des {
		n := de.Name()
		if de.IsDir() || !strings.HasPrefix(n, spillPrefix) || !strings.HasSuffix(n, spillSuffix) {
			continue
		}
		sf := spillFile{path: filepath.Join(dir, n), entries: -1}
		if cs, err := readSpill(sf.path); err == nil {
			sf.entries = len(cs)
		}
		files = append(files, sf)
	}
	slices.SortFunc(files, func(a, b spillFile) int { return strings.Compare(a.path, b.path) })
	return files, nil
}

func spilledEntries(files []spillFile) int {
	n := 0
	for _, f := range files {
		n += max(f.entries, 0)
	}
	return n
}
