package h2guard

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
)

func settingsPayload(s ...http2.Setting) []byte {
	p := make([]byte, 0, 6*len(s))
	for _, v := range s {
		p = binary.BigEndian.AppendUint16(p, uint16(v.ID))
		p = binary.BigEndian.AppendUint32(p, v.Val)
	}
	return p
}

func parseSettings(p []byte) []http2.Setting {
	var s []http2.Setting
	for i := 0; i+6 <= len(p); i += 6 {
		s = append(s, http2.Setting{ID: http2.SettingID(binary.BigEndian.Uint16(p[i:])), Val: binary.BigEndian.Uint32(p[i+2:])})
	}
	return s
}

// inOrder is RFC 9113 §6.5.3's processing: each value in turn, unknown
// identifiers ignored, the first invalid value ending it with its error.
// It returns the values of the known settings.
func inOrder(s []http2.Setting) (map[http2.SettingID]uint32, error) {
	got := map[http2.SettingID]uint32{}
	for _, v := range s {
		if v.ID < http2.SettingHeaderTableSize || v.ID > http2.SettingNoRFC7540Priorities {
			continue
		}
		if err := v.Valid(); err != nil {
			return got, err
		}
		got[v.ID] = v.Val
	}
	return got, nil
}

// hasDuplicates is Go's server's check on a SETTINGS frame.
func hasDuplicates(s []http2.Setting) bool {
	seen := map[http2.SettingID]bool{}
	for _, v := range s {
		if seen[v.ID] {
			return true
		}
		seen[v.ID] = true
	}
	return false
}

func TestDedupeSettings(t *testing.T) {
	st := func(id http2.SettingID, v uint32) http2.Setting { return http2.Setting{ID: id, Val: v} }
	iws, mfs, push, hts := http2.SettingInitialWindowSize, http2.SettingMaxFrameSize, http2.SettingEnablePush, http2.SettingHeaderTableSize
	for _, tc := range []struct {
		name string
		in   []http2.Setting
		want []http2.Setting
	}{
		{"none repeated", []http2.Setting{st(iws, 100), st(mfs, 16384)}, []http2.Setting{st(iws, 100), st(mfs, 16384)}},
		{"the last holds", []http2.Setting{st(iws, 100), st(iws, 1)}, []http2.Setting{st(0xffff, 100), st(iws, 1)}},
		{"three times, others between", []http2.Setting{st(iws, 1), st(push, 0), st(iws, 2), st(0xffff, 7), st(iws, 3)},
			[]http2.Setting{st(0xfffe, 1), st(push, 0), st(0xfffd, 2), st(0xffff, 7), st(iws, 3)}},
		{"an invalid value stays, the later ones go", []http2.Setting{st(iws, 1), st(iws, 1<<31), st(iws, 5)},
			[]http2.Setting{st(0xffff, 1), st(iws, 1<<31), st(0xfffe, 5)}},
		{"unknown identifiers repeated", []http2.Setting{st(0x77, 1), st(0x77, 2)}, []http2.Setting{st(0xffff, 1), st(0x77, 2)}},
		{"HEADER_TABLE_SIZE stays repeated", []http2.Setting{st(hts, 0), st(hts, 4096)}, []http2.Setting{st(hts, 0), st(hts, 4096)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := settingsPayload(tc.in...)
			dedupeSettings(p)
			if diff := cmp.Diff(tc.want, parseSettings(p)); diff != "" {
				t.Errorf("dedupeSettings (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzDedupeSettings: a SETTINGS frame fixed up has no repeated setting
// but HEADER_TABLE_SIZE, and Go's server processing it in order ends as
// RFC 9113's in-order processing of the original does: the same values,
// or the same error.
func FuzzDedupeSettings(f *testing.F) {
	f.Add(settingsPayload(http2.Setting{ID: 4, Val: 100}, http2.Setting{ID: 4, Val: 1}))
	f.Add(settingsPayload(http2.Setting{ID: 2, Val: 1}, http2.Setting{ID: 2, Val: 7}, http2.Setting{ID: 5, Val: 1}, http2.Setting{ID: 2, Val: 0}))
	f.Fuzz(func(t *testing.T, p []byte) {
		if len(p)%6 != 0 || !canDedupe(0, uint32(len(p))) {
			return
		}
		// Small identifiers, so that they repeat and are mostly defined.
		for i := 0; i < len(p); i += 6 {
			p[i], p[i+1] = 0, p[i+1]%10
		}
		in := parseSettings(p)
		want, wantErr := inOrder(in)
		dedupeSettings(p)
		out := parseSettings(p)
		seen := map[http2.SettingID]bool{}
		for _, v := range out {
			if seen[v.ID] && v.ID != http2.SettingHeaderTableSize {
				t.Fatalf("%v fixed up to %v: %v repeated", in, out, v.ID)
			}
			seen[v.ID] = true
		}
		got, gotErr := inOrder(out)
		if gotErr != wantErr || gotErr == nil && !hasDuplicates(out) && !cmp.Equal(got, want) {
			t.Fatalf("%v fixed up to %v: processed to %v, %v; in order: %v, %v", in, out, got, gotErr, want, wantErr)
		}
	})
}
