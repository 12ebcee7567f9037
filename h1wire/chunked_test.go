package h1wire

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// TestChunkedRoundTrip: chunks written with AppendChunkSize and
// LastChunk read back whole through NewChunkedReader, and the trailer
// section after them through ReadFields.
func TestChunkedRoundTrip(t *testing.T) {
	var b []byte
	var want bytes.Buffer
	for _, n := range []int{1, 15, 16, 255, 4096, 40000} {
		data := bytes.Repeat([]byte{byte('a' + n%26)}, n)
		b = AppendChunkSize(b, n)
		b = append(b, data...)
		b = append(b, "\r\n"...)
		want.Write(data)
	}
	b = append(b, LastChunk...)
	b = AppendField(b, "X-Sum", " 42 ")
	b = append(b, "\r\n"...)
	br := bufio.NewReader(bytes.NewReader(b))
	got, err := io.ReadAll(NewChunkedReader(br))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes, err %v; want %d", len(got), err, want.Len())
	}
	var hr HeadReader
	if err := hr.ReadFields(br, 1<<10); err != nil || len(hr.Fields) != 1 || hr.Fields[0] != (Field{"X-Sum", "42"}) {
		t.Fatalf("trailers %q, err %v", hr.Fields, err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("bytes left after the trailers")
	}
	if s := string(AppendChunkSize(nil, 0x1f)); !strings.EqualFold(s, "1f\r\n") {
		t.Errorf("AppendChunkSize(31) = %q", s)
	}
}
