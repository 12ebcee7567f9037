package analytics

// Crash leaves f as kill -9 would: the journal's files are closed with
// what is on disk, and whatever f held only in memory is lost. f must not
// be used afterwards.
func Crash(f *Flusher) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.j != nil {
		f.j.j.Close()
	}
}
