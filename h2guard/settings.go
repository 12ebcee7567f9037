package h2guard

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// maxDedupe is the most settings a SETTINGS frame may hold to be fixed up:
// RFC 9113 defines 7, and a client sends each once.
const maxDedupe = 16

// canDedupe reports whether a SETTINGS frame with flags and length is one
// dedupeSettings takes: not an ACK, whole settings, at most maxDedupe.
// Others go to the server as they are (it takes up to 100 settings, none
// repeated).
func canDedupe(flags http2.Flags, length uint32) bool {
	return !flags.Has(http2.FlagSettingsAck) && length > 6 && length%6 == 0 && length/6 <= maxDedupe
}

// dedupeSettings rewrites a SETTINGS payload in which a setting is
// repeated so that the server applies it once. RFC 9113 §6.5.3: the
// values are processed in the order they appear, so the last one holds;
// Go's server instead closes the connection on any repeat (PROTOCOL_ERROR,
// "settings_big_or_dups"). Each value that a later one replaces gets an
// identifier the frame does not use, which the server ignores as RFC 9113
// §6.5.2 has it ignore any unknown setting; a value that is invalid stays,
// and the later ones of its identifier go instead, so the frame still
// ends the connection with that value's error, as in-order processing
// would. SETTINGS_HEADER_TABLE_SIZE is left repeated: its smallest value
// counts too (RFC 7541 §4.2), which one value cannot say.
func dedupeSettings(p []byte) {
	n := len(p) / 6
	id := func(i int) http2.SettingID { return http2.SettingID(binary.BigEndian.Uint16(p[6*i:])) }
	val := func(i int) uint32 { return binary.BigEndian.Uint32(p[6*i+2:]) }
	var drop [maxDedupe]bool
	for i := range n {
		if drop[i] || id(i) == http2.SettingHeaderTableSize {
			continue
		}
		keep := -1 // the one of id(i)'s values the server gets: its first invalid one, else its last
		for j := i; j < n; j++ {
			if id(j) != id(i) {
				continue
			}
			if keep < 0 || (http2.Setting{ID: id(keep), Val: val(keep)}).Valid() == nil {
				keep = j
			}
		}
		for j := i; j < n; j++ {
			if id(j) == id(i) && j != keep {
				drop[j] = true
			}
		}
	}
	next := uint16(0xffff)
	for i := range n {
		if !drop[i] {
			continue
		}
		for used(p, n, next) {
			next--
		}
		binary.BigEndian.PutUint16(p[6*i:], next)
		next--
	}
}

// used reports whether one of the n settings in p has identifier v.
func used(p []byte, n int, v uint16) bool {
	for i := range n {
		if binary.BigEndian.Uint16(p[6*i:]) == v {
			return true
		}
	}
	return false
}
