package memcached

// Gathered returns how many checks wait, in all, for a read of their
// counter that another check sends for them.
func (s *Store) Gathered() int {
	n := 0
	for _, sv := range s.servers {
		for i := range sv.shards {
			sh := &sv.shards[i]
			sh.mu.Lock()
			for _, st := range sh.reads {
				if st.next != nil {
					n += 1 + st.next.waiting
				}
			}
			sh.mu.Unlock()
		}
	}
	return n
}
