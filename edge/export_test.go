package edge

import (
	"context"
	"time"
)

// Decide is the on-demand decision for name: certmagic's DecisionFunc.
func (e *Edge) Decide(ctx context.Context, name string) error { return e.gate.decide(ctx, name) }

// OnEvent is certmagic's OnEvent: a cert_obtaining event of a new order
// is refused over orders_per_hour.
func (e *Edge) OnEvent(ctx context.Context, event string, data map[string]any) error {
	return e.onEvent(ctx, event, data)
}

// SetClock makes the edge's decisions and its session tickets read the
// time from now. Call it before the first decision and before Listen.
func (e *Edge) SetClock(now func() time.Time) { e.gate.now = now }
