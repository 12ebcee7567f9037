package gateway

// SetBuildHook makes every build call f once the new snapshot's proxy and
// limiter store exist (nil: no hook), so that tests can make a constructor
// panic. It returns a function restoring the previous hook.
func SetBuildHook(f func()) (restore func()) {
	var h *func(*snapshot)
	if f != nil {
		fn := func(*snapshot) { f() }
		h = &fn
	}
	prev := buildHook.Swap(h)
	return func() { buildHook.Store(prev) }
}

// SettleTime is how long a changed config file must stay unchanged before
// the watch reloads it.
const SettleTime = settleTime
