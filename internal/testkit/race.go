//go:build race

package testkit

// Race reports whether the tests run with the race detector, which makes
// the hot paths several times slower: measurement tests scale their load
// down with it.
const Race = true
