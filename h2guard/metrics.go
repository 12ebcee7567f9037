package h2guard

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
)

// Reason is why a connection was cut: the budget that ran out, by the
// frame that found it empty, or the header timeout.
type Reason uint8

const (
	_                 Reason = iota
	ResetStream              // RST_STREAM frames
	StreamError              // streams the server reset for the client's protocol errors
	EmptyData                // DATA frames with no payload and no END_STREAM
	EmptyContinuation        // CONTINUATION frames with no payload and no END_HEADERS
	Priority                 // PRIORITY frames
	Settings                 // SETTINGS frames
	Ping                     // PING frames
	WindowUpdate             // WINDOW_UPDATE frames beyond the DATA frames' credit
	UnknownFrame             // frames of types RFC 9113 does not define
	HeaderTimeout            // a header block open past the header timeout
	numReasons
)

var reasons = [numReasons]string{"", "rst_stream", "stream_error", "empty_data", "empty_continuation",
	"priority", "settings", "ping", "window_update", "unknown_frame", "header_timeout"}

// String returns r as the metric labels it.
func (r Reason) String() string {
	if r >= numReasons {
		return "unknown"
	}
	return reasons[r]
}

// Metrics are the guard's Prometheus collectors. The gateway registers
// them once, whether it serves HTTP/2 or not, so that its metrics are the
// same set in every config. The zero value is not usable; a nil *Metrics
// counts nothing.
type Metrics struct {
	cut [numReasons]prometheus.Counter
}

// NewMetrics returns the guard's collectors, registered with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	vec := metric.With(reg).CounterVec("linkgate_http2_connections_cut_total", "HTTP/2 connections cut with GOAWAY ENHANCE_YOUR_CALM, by reason: the budget that ran out (rst_stream, stream_error, empty_data, empty_continuation, priority, settings, ping, window_update, unknown_frame) or header_timeout.", "reason")
	m := &Metrics{}
	for r := Reason(1); r < numReasons; r++ {
		m.cut[r] = vec.WithLabelValues(r.String())
	}
	return m
}
