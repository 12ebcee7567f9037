package h1serve

import "time"

// scanEvery is how often the scanner looks for handlers that run long. A
// handler is watched for the client leaving (which cancels the request's
// context, as net/http watches every request) once the scanner has seen
// it running twice, 10 to 20 ms after it began. Most requests end sooner
// and cost no watch, and a request costs the scanner no timer of its own.
const scanEvery = 10 * time.Millisecond

// scanIdle is how many scans in a row that find no handler running end
// the scanner (Server.scanIdle, which the tests set lower); the next
// request starts it again.
const scanIdle = 100

// scanning makes sure the scanner runs; a connection calls it once its
// handler has begun (conn.handlers odd).
func (s *Server) scanning() {
	if !s.scanner.Load() && s.scanner.CompareAndSwap(false, true) {
		go s.scan()
	}
}

// scan starts the watch of every handler that it finds running on two
// scans in a row. It ends after scanIdle scans that find none running:
// it says so first, and looks once more, so that a handler that began
// meanwhile, having seen the scanner still running, is not missed.
func (s *Server) scan() {
	tick := time.NewTicker(scanEvery)
	defer tick.Stop()
	for idle := 0; ; {
		<-tick.C
		if s.scanOnce() {
			idle = 0
			continue
		}
		if idle++; idle < s.scanIdle {
			continue
		}
		if s.scanEnds != nil {
			s.scanEnds()
		}
		s.scanner.Store(false)
		if !s.scanOnce() || !s.scanner.CompareAndSwap(false, true) {
			return // none running, or a new scanner runs
		}
		idle = 0
	}
}

// scanOnce looks at every connection; true when a handler runs.
func (s *Server) scanOnce() bool {
	running := false
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		n := c.handlers.Load()
		if n%2 == 1 {
			running = true
			if n == c.scanned && n != c.watched {
				c.watched = n
				go c.watch()
			}
		}
		c.scanned = n
	}
	return running
}
