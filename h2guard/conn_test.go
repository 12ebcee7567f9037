package h2guard

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/http2"
)

// chunked is a connection whose reads return what is left of data in
// chunks of the sizes given, cyclically (a TLS record, a TCP segment).
type chunked struct {
	net.Conn // nil: only Read, SetReadDeadline and Close are used
	data     []byte
	sizes    []int
	i        int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(p)
	if len(c.sizes) > 0 {
		n = min(n, max(c.sizes[c.i%len(c.sizes)], 1))
		c.i++
	}
	n = copy(p, c.data[:min(n, len(c.data))])
	c.data = c.data[n:]
	return n, nil
}

func (c *chunked) SetReadDeadline(time.Time) error { return nil }
func (c *chunked) Close() error                    { return nil }

// unlimited is a guard whose budgets no test stream exhausts.
func unlimited() *guard {
	return &guard{resets: perSecond(1<<20, 1<<20), overhead: perSecond(1<<20, 1<<20), headerTimeout: time.Hour}
}

// stream is a client's side of a connection: the preface and one frame of
// each kind the guard tells apart, settings not repeated.
func stream() []byte {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	fr.WriteWindowUpdate(0, 1<<20)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: bytes.Repeat([]byte{0x82}, 40), EndHeaders: true, EndStream: true})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x82, 0x86}})
	fr.WriteContinuation(3, false, nil)
	fr.WriteContinuation(3, false, []byte{0x84})
	fr.WriteContinuation(3, true, []byte{0x41})
	fr.WriteData(3, false, bytes.Repeat([]byte("a"), 3000))
	fr.WriteData(3, false, nil)
	fr.WriteData(3, true, nil)
	fr.WritePriority(5, http2.PriorityParam{Weight: 7})
	fr.WritePing(false, [8]byte{1, 2})
	fr.WriteRSTStream(3, http2.ErrCodeCancel)
	fr.WriteRawFrame(0x33, 0, 0, []byte("unknown"))
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: []byte{0x82}, EndHeaders: false})
	fr.WriteContinuation(7, false, []byte{0x86})
	return b.Bytes()
}

// readAll reads c to its end with reads of the sizes given, cyclically.
func readAll(t testing.TB, c *Conn, sizes []int) []byte {
	var out []byte
	buf := make([]byte, 1<<16)
	for i := 0; ; i++ {
		n := len(buf)
		if len(sizes) > 0 {
			n = max(sizes[i%len(sizes)], 1)
		}
		m, err := c.Read(buf[:n])
		out = append(out, buf[:m]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
}

// state is what the guard knows of a connection after reading it, but
// its buckets, which follow the clock.
type state struct {
	Preface, HeadN     int
	Remain, LastStream uint32
	InBlock            bool
}

func stateOf(c *Conn) state {
	return state{c.preface, c.headN, c.remain, c.lastStream, c.inBlock}
}

// FuzzScanSplits: however the bytes are split, by the connection's reads
// or by the reader's buffers, the guard passes them on unchanged and
// ends knowing what it knows when it reads them whole.
func FuzzScanSplits(f *testing.F) {
	f.Add([]byte{1}, []byte{9})
	f.Add([]byte{7, 3, 200}, []byte{9, 1, 40})
	f.Add([]byte{24, 9, 12}, []byte{255})
	f.Fuzz(func(t *testing.T, chunks, reads []byte) {
		in := stream()
		whole := unlimited().newConn(&chunked{data: bytes.Clone(in)}, len(http2.ClientPreface))
		if out := readAll(t, whole, nil); !bytes.Equal(out, in) {
			t.Fatal("read whole: the bytes changed")
		}
		sizes := func(b []byte) []int {
			s := make([]int, len(b))
			for i, v := range b {
				s[i] = int(v)
			}
			return s
		}
		split := unlimited().newConn(&chunked{data: bytes.Clone(in), sizes: sizes(chunks)}, len(http2.ClientPreface))
		if out := readAll(t, split, sizes(reads)); !bytes.Equal(out, in) {
			t.Fatalf("read in pieces: the bytes changed")
		}
		if diff := cmp.Diff(stateOf(whole), stateOf(split)); diff != "" {
			t.Errorf("state after reading in pieces (-whole +pieces):\n%s", diff)
		}
	})
}

// TestRepeatedSettingsSplit: a SETTINGS frame with a repeated setting is
// fixed up however its payload arrives, when the reader asks for the
// payload whole (as x/net/http2's Framer does).
func TestRepeatedSettingsSplit(t *testing.T) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	for _, chunk := range []int{1, 2, 5, 9, 100} {
		c := unlimited().newConn(&chunked{data: bytes.Clone(b.Bytes()), sizes: []int{chunk}}, 0)
		f := http2.NewFramer(nil, c)
		got, err := f.ReadFrame()
		if err != nil {
			t.Fatalf("chunks of %d: %v", chunk, err)
		}
		sf := got.(*http2.SettingsFrame)
		if sf.HasDuplicates() {
			t.Errorf("chunks of %d: the settings still repeat", chunk)
		}
		if v, _ := sf.Value(http2.SettingInitialWindowSize); v != 1 {
			t.Errorf("chunks of %d: INITIAL_WINDOW_SIZE %d, want the last value, 1", chunk, v)
		}
	}
}

// TestBudgetsCut: a connection reading past a budget gets the connection
// error that makes the server send GOAWAY ENHANCE_YOUR_CALM, and only
// that from then on; the frames within budget pass.
func TestBudgetsCut(t *testing.T) {
	for _, tc := range []struct {
		name         string
		first, frame []byte
	}{
		{"rst_stream", nil, frameBytes(3, 0, 1, []byte{0, 0, 0, 8})},
		{"empty continuation", frameBytes(1, 0, 1, []byte{0x82}), frameBytes(9, 0, 1, nil)},
		{"ping", nil, frameBytes(6, 0, 0, make([]byte, 8))},
		{"window update", nil, frameBytes(8, 0, 0, []byte{0, 0, 0, 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &guard{resets: perSecond(1, 5), overhead: perSecond(1, 5)}
			c := g.newConn(&chunked{data: append(tc.first, bytes.Repeat(tc.frame, 100)...)}, 0)
			f := http2.NewFramer(nil, c)
			if tc.first != nil {
				if _, err := f.ReadFrame(); err != nil {
					t.Fatal(err)
				}
			}
			n := 0
			var err error
			for ; n < 100; n++ {
				if _, err = f.ReadFrame(); err != nil {
					break
				}
			}
			if n < 5 || n > 6 || err != http2.ConnectionError(http2.ErrCodeEnhanceYourCalm) {
				t.Errorf("read %d frames, then %v; want 5 or 6 (a second's refill at most), then ENHANCE_YOUR_CALM", n, err)
			}
			if _, err := c.Read(make([]byte, 9)); err != http2.ConnectionError(http2.ErrCodeEnhanceYourCalm) {
				t.Errorf("the read after the cut: %v, want the cut again", err)
			}
		})
	}
}

// BenchmarkRead: the guard's cost per frame, read as x/net/http2's
// Framer reads (the header, then the payload, each read whole): a mix of
// a request's HEADERS, a DATA frame of a body and a WINDOW_UPDATE
// credited to the DATA frames sent, against the same reads from the
// connection bare.
func BenchmarkRead(b *testing.B) {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: bytes.Repeat([]byte{0x82}, 60), EndHeaders: true})
	fr.WriteData(1, true, bytes.Repeat([]byte("a"), 200))
	fr.WriteWindowUpdate(0, 4096)
	frames := buf.Bytes()
	const perLoop = 3
	for _, bare := range []bool{true, false} {
		b.Run(map[bool]string{true: "bare", false: "guarded"}[bare], func(b *testing.B) {
			src := &chunked{}
			var r io.Reader = src
			if !bare {
				c := unlimited().newConn(src, 0)
				c.dataSent.Store(1 << 40)
				r = c
			}
			head, payload := make([]byte, frameHeaderLen), make([]byte, 1<<14)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += perLoop {
				src.data = frames
				for range perLoop {
					io.ReadFull(r, head)
					n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
					io.ReadFull(r, payload[:n])
				}
			}
		})
	}
}
