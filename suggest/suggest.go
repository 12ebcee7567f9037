// Package suggest finds the name a user most likely meant when they wrote
// one that is not known: "lst" for "last", "servr" for "server". The stats
// API's query parameters and the config file's fields use it, so that
// both answer a typo with the same "did you mean".
package suggest

import "strings"

// maxEdits is how far a name may be from a known one to be taken for a
// typo of it: two edits catch a dropped, doubled, swapped or wrong letter
// or two, and little else.
const maxEdits = 2

// Closest returns the name of known within two edits (insertions,
// deletions or substitutions of a byte, letters compared without case) of
// name, the closest one and the first of those as close, or "" when none
// is that close.
func Closest(name string, known ...string) string {
	name = strings.ToLower(name)
	best, bestD := "", maxEdits+1
	for _, k := range known {
		if d := len(name) - len(k); d > maxEdits || -d > maxEdits {
			continue // too long or too short to be within two edits
		}
		if d := distance(name, strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
